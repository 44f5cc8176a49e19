"""The manual builds with `mkdocs build --strict` (a broken link or anchor fails), its generated
pages are up to date, every variable is a documented field of the settings model and listed in
config/tenantd.env.example, and the README stays a front page whose links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tenantd.app import manual
from tests.docs.snippets import ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")
README = ROOT / "README.md"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def test_the_manual_builds_in_strict_mode(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()
    tour = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    assert "auth/verify-email" in tour  # the README's tour, included at build time


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md) and [anchor](index.md#nothing)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (ROOT / "mkdocs.yml")
        .read_text()
        .replace("docs_dir: docs", f"docs_dir: {docs}")
        .split("\nnav:")[0]
    )
    done = build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "nowhere.md" in done.stderr and "#nothing" in done.stderr


def test_the_generated_pages_are_up_to_date() -> None:
    for path, text in manual.pages().items():
        assert path.read_text() == text, f"{path.name} is out of date: run scripts/docs"


def test_the_example_lists_every_field_of_the_settings_model_and_nothing_else() -> None:
    missing, unread = manual.undocumented()
    assert missing == set(), f"add to config/tenantd.env.example: {sorted(missing)}"
    assert unread == set(), f"in the example but no setting reads it: {sorted(unread)}"


def test_the_example_shows_the_models_defaults() -> None:
    model = {v.name: v for section in manual.model_sections() for v in section.variables}
    for section in manual.parse_example(manual.EXAMPLE.read_text()):
        for variable in section.variables:
            field = model.get(variable.name)
            if field is None:
                continue  # a family's example (OAUTH_GOOGLE_*)
            assert variable.commented == field.commented, variable.name
            if not field.commented:
                assert variable.value == field.value, variable.name


def test_every_field_is_described_or_shares_the_one_above() -> None:
    for section in manual.model_sections():
        assert section.variables, section.title
        assert section.variables[0].meaning, (section.title, section.variables[0].name)


def test_only_the_settings_read_the_environment() -> None:
    """Every variable is a field of the settings model (so it is documented from it); the
    only other reader is the CLI's TENANTD_ENV_FILE, which names the file to load."""
    readers = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tenantd").rglob("*.py")
        if re.search(r"os\.environ|os\.getenv|getenv\(", path.read_text())
    }
    assert readers == {"tenantd/settings.py", "tenantd/cli/common.py"}


def test_the_configuration_page_shows_each_variable_of_the_model() -> None:
    sections = [
        manual.Section(
            "Things",
            ["Some things."],
            [
                manual.Variable("POLL_SECONDS", "5", False, "How often to poll."),
                manual.Variable("SOME_TOKEN", "abc", True, "A secret, unset by default."),
            ],
        )
    ]
    page = manual.configuration_page(sections)
    assert "## Things" in page and "Some things." in page
    assert "| `POLL_SECONDS` | `5` | How often to poll. |" in page
    assert "| `SOME_TOKEN` | *unset* | A secret, unset by default. Example: `abc`. |" in page
    generated = manual.configuration_page()
    assert "| `DB_POOL_MAX` | `10` | As above. |" in generated
    assert "| `QUEUES_ENABLED` | `false` |" in generated


def test_the_api_page_lists_every_operation_of_the_document() -> None:
    document = manual.openapi_document()
    page = manual.api_page(document)
    for path, methods in document["paths"].items():
        for method in methods:
            assert f"`{method.upper()} {path}" in page, (method, path)


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "scripts/run" in text and "scripts/test" in text
    assert "../shared" not in text
    for heading in ("## Two commands", "## A five-minute tour", "## Security", "## The manual"):
        assert heading in text


@pytest.mark.parametrize("page", [README, ROOT / "bench" / "README.md"], ids=lambda p: p.name)
def test_readme_links_resolve(page: Path) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    local = [link for link in links if "://" not in link]
    assert local
    for link in local:
        assert (page.parent / link).exists(), link
