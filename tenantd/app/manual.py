"""The generated pages of the manual: `docs/configuration.md` and `docs/http-api.md`.

`python -m tenantd.app.manual` (or `scripts/docs`) rewrites both; `tests/docs/test_manual.py`
fails while either differs from what this module generates, so they cannot go stale.

- Configuration: every field of the settings model (`AppSettings`: the kernel's root and
  the sections it composes), by section, with its default and its description. The example
  file `config/tenantd.env.example` must list the same variables: one the model reads that
  the example lacks, or one the example has that the model never reads, is an error.
- HTTP API: every operation of the OpenAPI document the server serves at
  `/api/v1/openapi.json`, built from the same route table (`create_app`), grouped by tag.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from tenantd.app.factory import create_app
from tenantd.app.settings import AppSettings, load_settings
from tenantd.settings import Section as SettingsSection
from tenantd.settings import Settings
from tenantd.web.openapi import build_openapi
from tenantd.web.routing import ROUTE_SPEC

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent
EXAMPLE = ROOT / "config" / "tenantd.env.example"
CONFIGURATION = ROOT / "docs" / "configuration.md"
HTTP_API = ROOT / "docs" / "http-api.md"

# Example variables of a family a field reads from a prefix (one provider named `google`).
EXAMPLE_ONLY = re.compile(r"^OAUTH_GOOGLE_")


@dataclass
class Variable:
    name: str
    value: str
    commented: bool  # `# NAME=value`: unset by default, `value` is an example
    meaning: str  # "" when it shares the meaning of the variable above it


@dataclass
class Section:
    title: str
    intro: list[str] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple | list):
        return ",".join(_shown(item) for item in value)
    return str(value)


def _variable(name: str, info: FieldInfo) -> Variable:
    """A field as the manual shows it: its default, or an example when it has none."""
    derived = isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("derived")
    default = info.get_default(call_default_factory=True)
    unset = derived or default is None or default == "" or default == ()
    example = _shown(info.examples[0]) if info.examples else ""
    value = example if unset else _shown(default)
    return Variable(name, value, bool(unset), info.description or "")


def model_sections(model: type[Settings] = AppSettings) -> list[Section]:
    """Every variable of the settings model, by section (the root's own fields first)."""
    root = Section("Deployment", ["What every instance of one deployment shares."])
    sections = [root]
    for info in model.model_fields.values():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, SettingsSection):
            intro = " ".join((kind.__doc__ or "").split())
            sections.append(
                Section(
                    kind.title or kind.__name__,
                    [intro] if intro else [],
                    [_variable(name, field_info) for name, field_info in kind.variables()],
                )
            )
        elif isinstance(info.validation_alias, str):
            root.variables.append(_variable(info.validation_alias, info))
    return sections


def read_variables(model: type[Settings] = AppSettings) -> set[str]:
    """Every environment variable tenantd reads: the settings model's."""
    return {v.name for section in model_sections(model) for v in section.variables}


SECTION = re.compile(r"^#\s*---\s*(.+?)\s*-*\s*$")
ASSIGNMENT = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]+)=(.*)$")


def parse_example(text: str) -> list[Section]:
    """`config/tenantd.env.example` as sections of documented variables."""
    sections = [Section("General")]
    comment: list[str] = []
    shared = False  # the variable above took the pending comment: the next shares it
    for raw in text.splitlines():
        line = raw.strip()
        heading = SECTION.match(line)
        assignment = ASSIGNMENT.match(line)
        if heading:
            sections.append(Section(heading.group(1).strip(" -")))
            comment, shared = [], False
        elif assignment:
            prefix, name, value = assignment.groups()
            meaning = " ".join(comment)
            sections[-1].variables.append(
                Variable(name, value.strip(), prefix is not None, "" if shared else meaning)
            )
            comment, shared = [], True
        elif line.startswith("#"):
            if shared:
                comment, shared = [], False
            comment.append(line.lstrip("#").strip())
        else:  # a blank line ends a group; a comment before it introduces the section
            if comment and not sections[-1].variables:
                sections[-1].intro.extend(comment)
            comment, shared = [], False
    return [section for section in sections if section.variables or section.intro]


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def configuration_page(sections: list[Section] | None = None) -> str:
    """The Markdown of `docs/configuration.md`, from the settings model."""
    sections = model_sections() if sections is None else sections
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `scripts/docs` from the settings model (tenantd/app/settings.py and",
        "     the sections it composes); edit the fields' descriptions, not this page",
        "     (tests/docs/test_manual.py checks it). -->",
        "",
        "Everything is an environment variable. `tenantd --env-file PATH ...` (or",
        "`tenantd serve --env-file PATH`) loads a `KEY=value` file under the process environment,",
        "which wins over it. `config/tenantd.env.example` is the same list as a file to copy.",
        "A malformed value (a number that is not one, a boolean that is not true/false) stops",
        "start-up with one line naming the variable; a blank value is the default.",
        "",
        "**Default** is the value used when the variable is unset; *unset* means off or derived",
        "(the meaning says from what).",
    ]
    for section in sections:
        if not section.variables:
            continue
        lines += ["", f"## {section.title}", ""]
        if section.intro:
            lines += [" ".join(section.intro), ""]
        lines += ["| variable | default | meaning |", "|---|---|---|"]
        for variable in section.variables:
            if variable.commented:
                default = "*unset*"
                example = f" Example: `{variable.value}`." if variable.value else ""
            else:
                default = f"`{variable.value}`" if variable.value else "*empty*"
                example = ""
            meaning = variable.meaning or "As above."
            lines.append(f"| `{variable.name}` | {cell(default)} | {cell(meaning + example)} |")
    return "\n".join(lines) + "\n"


def undocumented(text: str | None = None) -> tuple[set[str], set[str]]:
    """(read by the settings model but not in the example, in the example but never read)."""
    sections = parse_example(EXAMPLE.read_text() if text is None else text)
    documented = {v.name for s in sections for v in s.variables}
    code = read_variables()
    return code - documented, {n for n in documented - code if not EXAMPLE_ONLY.match(n)}


def openapi_document() -> dict[str, Any]:
    """The document `/api/v1/openapi.json` serves, from the same route table."""
    settings = load_settings(environ={"SECRET_KEY": "d" * 32, "TENANTD_DATA_DIR": "/nonexistent"})
    app = create_app(settings, "postgresql:///unused")  # built, never started: no connection
    return build_openapi(app[ROUTE_SPEC])


def _access(operation: dict[str, Any]) -> str:
    security = operation.get("security")
    if not security:
        return "public"
    kinds = []
    for requirement in security:
        if "cookieAuth" in requirement:
            kinds.append("session")
        elif "apiKeyAuth" in requirement:
            kinds.append("API key `" + "`, `".join(requirement["apiKeyAuth"]) + "`")
        else:
            kinds.append("anonymous")
    return " or ".join(kinds)


def _fields(document: dict[str, Any], operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    for media in content.values():
        schema = media.get("schema", {})
        while "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        required = set(schema.get("required", []))
        names = [f"`{n}`" if n in required else f"`{n}?`" for n in schema.get("properties", {})]
        return ", ".join(names) or "body"
    return ""


def _query(operation: dict[str, Any]) -> str:
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    return "?" + "&".join(names) if names else ""


def _success(operation: dict[str, Any]) -> str:
    return next(iter(operation["responses"]))


def api_page(document: dict[str, Any] | None = None) -> str:
    """The Markdown of `docs/http-api.md`."""
    document = openapi_document() if document is None else document
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            by_tag.setdefault(operation["tags"][0], []).append((method.upper(), path, operation))
    count = sum(len(rows) for rows in by_tag.values())
    lines = [
        "# HTTP API",
        "",
        "<!-- Generated by `scripts/docs` from the OpenAPI document the server builds from its",
        "     route table; tests/docs/test_manual.py fails while it is out of date. -->",
        "",
        f"Every route of the API ({count} operations), from the OpenAPI 3.1 document each",
        "`tenantd serve` publishes at `GET /api/v1/openapi.json` (generated from the route table",
        "and its pydantic models: string patterns and lengths, push subscription formats,",
        "redirects as 302 with `Location`). Fetch that document for the full request and answer",
        "schemas, or feed it to a validating gateway or a client generator.",
        "",
        "Conventions, for every route:",
        "",
        "- JSON answers are wrapped, `{success: true, data, timestamp}`, except where the",
        "  document says otherwise (`/api/v1/users/me`, introspection, the JWKS, the probes).",
        "  Every error is `{success: false, error: {code, message, details}}` with its status;",
        "  the capability pages name the codes.",
        "- **who**: *session* needs the `auth_token` cookie (and, for a cookie-authenticated",
        "  mutation, an allowed `Origin` or `Referer`: CSRF defence); *API key* takes",
        "  `Authorization: Bearer tdk_...` holding the named scope",
        "  ([API keys](webhooks.md#api-keys));",
        "  *public* needs neither; webhooks are authenticated by their signature.",
        "- No string of a request (body field, query or path parameter) may hold a C0 control",
        "  character such as NUL; only multi-line text fields keep tab, LF and CR. Such a request",
        "  is 422 `VALIDATION_ERROR` naming the field.",
        "- **body**: the fields of the JSON body; `?` marks an optional one.",
    ]
    for tag in sorted(by_tag):
        lines += ["", f"## {tag}", "", "| route | who | body | answer | summary |"]
        lines.append("|---|---|---|---|---|")
        for method, path, operation in sorted(by_tag[tag], key=lambda row: (row[1], row[0])):
            route = f"`{method} {path}{_query(operation)}`"
            lines.append(
                f"| {route} | {_access(operation)} | {_fields(document, operation)} "
                f"| {_success(operation)} | {cell(operation.get('summary') or '')} |"
            )
    return "\n".join(lines) + "\n"


def pages() -> dict[Path, str]:
    return {CONFIGURATION: configuration_page(), HTTP_API: api_page()}


def stale(generated: dict[Path, str]) -> list[Path]:
    return [
        path for path, text in generated.items() if not path.exists() or path.read_text() != text
    ]


def main(argv: Iterable[str] = ()) -> int:
    """Write the generated pages; `--check`: write nothing, exit 1 when one is stale."""
    missing, unread = undocumented()
    if missing or unread:
        sys.stderr.write(
            "config/tenantd.env.example:"
            f" undocumented {sorted(missing)}, never read {sorted(unread)}\n"
        )
        return 1
    generated = pages()
    if "--check" in argv:
        out_of_date = stale(generated)
        for path in out_of_date:
            sys.stderr.write(f"{path.relative_to(ROOT)} is out of date: run scripts/docs\n")
        return 1 if out_of_date else 0
    for path, text in generated.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
