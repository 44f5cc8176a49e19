"""Declarative event types: an event defined by data, not Python (issue 28, part 6).

A definition (the body of `PUT /api/v1/notifications/event-types/{type}`, or an entry of the
TENANTD_EVENT_CATALOG file with its `type`) gives the payload as JSON Schema, the default
channels, a label, dedup / digest / throttle keys and in-app and email texts as Jinja2
templates. `compile_declared` turns it into an ordinary `EventDefinition` (a pydantic class
that validates with the compiled JSON Schema, render functions over compiled templates), so
dispatch, dedup, digests, throttle, preferences, SSE and email treat both kinds alike.

Templates run in Jinja2's `ImmutableSandboxedEnvironment` with `payload` (the validated
payload) and `recipient` (the recipient's user id) in scope; an email's HTML is
autoescaped. A template that does not compile, or that reaches for an internal attribute
(`''.__class__`, `x['__globals__']`, `attr('_...')`) or another template, is refused when the
definition is given; the sandbox still guards every render. Everything is compiled once per
definition version: a send costs a schema validation and the renders, as a Python event's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import jinja2
import jinja2.meta
import jinja2.sandbox
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import yaml
from jinja2 import nodes
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from tenantd.errors import ValidationFailed

try:  # the same checks in Rust, ~30 times faster: the send's fast path when installed
    import jsonschema_rs

    FAST_SCHEMAS = True
except ImportError:  # pragma: no cover - jsonschema alone answers
    FAST_SCHEMAS = False
from tenantd.notifications.registry import (
    RESERVED_PREFIX,
    Dedup,
    Digest,
    EmailContent,
    EventDefinition,
    EventRegistry,
    InAppContent,
    RegisteredEvent,
    RegistryError,
    Throttle,
)
from tenantd.notifications.schemas import EventType
from tenantd.web.schemas import Multiline, RequestBody

Channel = Literal["in_app", "email", "sse", "web_push"]
Template = Annotated[str, Field(max_length=100_000), Multiline()]
Line = Annotated[str, Field(max_length=2_000)]
Localized = Line | dict[Annotated[str, Field(max_length=35)], Line]
MAX_WINDOW_SECONDS = 366 * 86_400
PLACEHOLDER_RECIPIENT = "00000000-0000-0000-0000-000000000000"


# --- the definition -----------------------------------------------------------------------


class DedupSpec(RequestBody):
    key: Template  # a template: `{{ payload.postId }}`
    window_seconds: int = Field(gt=0, le=MAX_WINDOW_SECONDS)


class SelfActionGuardSpec(RequestBody):
    payload_field: Annotated[str, Field(min_length=1, max_length=200)]  # dots reach inside


class InAppSpec(RequestBody):
    title: Template
    body: Template = ""
    cta_url: Template = ""
    cta_label: Template = ""


class EmailSpec(RequestBody):
    subject: Template
    text: Template
    html: Template | None = None


class DigestSpec(RequestBody):
    key: Template = "{{ recipient }}"
    window_seconds: int = Field(gt=0, le=MAX_WINDOW_SECONDS)
    max_items: int = Field(50, gt=0, le=1000)


class ThrottleSpec(RequestBody):
    key: Template = "{{ recipient }}"
    limit: int = Field(gt=0, le=1_000_000)
    window_seconds: int = Field(gt=0, le=MAX_WINDOW_SECONDS)


class EventTypeBody(RequestBody):
    """One declarative event type (the PUT body; a catalog entry adds `type`)."""

    model_config = ConfigDict(str_max_length=100_000)

    payload_schema: Annotated[dict[str, Any], Multiline()]
    default_channels: list[Channel] = Field(min_length=1, max_length=4)
    label: Localized
    description: Localized | None = None
    dedup: DedupSpec | None = None
    self_action_guard: SelfActionGuardSpec | None = None
    in_app: InAppSpec
    email: EmailSpec | None = None
    digest: DigestSpec | None = None
    throttle: ThrottleSpec | None = None
    critical: bool = False


class CatalogEntry(EventTypeBody):
    type: EventType


# --- templates ----------------------------------------------------------------------------

_UNSAFE_NAMES = frozenset(
    jinja2.sandbox.UNSAFE_FUNCTION_ATTRIBUTES
    | jinja2.sandbox.UNSAFE_METHOD_ATTRIBUTES
    | {"gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await"}
    | {"ag_code", "ag_frame", "tb_frame", "f_back", "f_globals", "f_locals", "f_builtins"}
    | {"mro", "format_map"}
)


MAX_REPEAT = 100_000  # characters or items one `*` may make
MAX_EXPONENT = 1_000
# A format width or precision of four digits or more (`{:>99999}`, `%99999s`) makes a string
# as long: refused, as are the filters whose width argument does the same.
_WIDE = re.compile(r"\{[^{}]*:[^{}]*\d{4,}[^{}]*\}|%[-#0 +.*]*\d{4,}")
_WIDE_FILTERS = ("center", "indent", "format", "wordwrap")


class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, also bounded in memory: `*`, `**` and `%` go through
    `call_binop` (so none is folded at compile time either) and refuse huge results."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any):
        super().__init__(**options)
        for name in _WIDE_FILTERS:
            self.filters.pop(name, None)
        self.globals.clear()  # no range, lipsum, cycler...: only what a render passes

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for sequence, times in ((left, right), (right, left)):
                sized = isinstance(sequence, str | list | tuple) and isinstance(times, int)
                if sized and len(sequence) * times > MAX_REPEAT:
                    raise jinja2.sandbox.SecurityError("a repetition too large")
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise jinja2.sandbox.SecurityError("an exponent too large")
        if operator == "%" and isinstance(left, str) and _WIDE.search(left):
            raise jinja2.sandbox.SecurityError("a format width too large")
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        template = getattr(value, "__self__", None)
        if isinstance(template, str) and _WIDE.search(template):
            raise jinja2.sandbox.SecurityError("a format width too large")
        return super().wrap_str_format(value)


# Not `email.templates.mail_environment` (the one factory of the shipped and Python-defined
# mail templates): these templates come from API callers and the catalog file, so they run in
# the immutable sandbox above, with no file loader (no layout, no filesystem) and chainable
# undefineds, and every render stays guarded.
def _environment(**options: Any) -> Sandbox:
    return Sandbox(undefined=jinja2.ChainableUndefined, keep_trailing_newline=True, **options)


_TEXT = _environment(autoescape=False)  # in-app texts, subjects and keys: stored as text


def _unsafe(name: object) -> bool:
    return isinstance(name, str) and (name.startswith("_") or name in _UNSAFE_NAMES)


TEXT_NAMES = frozenset({"payload", "recipient", "locale"})
EMAIL_NAMES = TEXT_NAMES | {"unsubscribe_url", "notification", "digest", "base_url"}


def _check_source(
    env: jinja2.Environment, source: str, field: str, names: frozenset[str] = TEXT_NAMES
) -> jinja2.nodes.Template:
    """The parsed template, or ValidationFailed naming `field` when it does not compile,
    names something not in scope or reaches outside the sandbox."""
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError as error:
        raise ValidationFailed(
            {field: f"template does not compile: {error.message} (line {error.lineno})"}
        ) from None
    if any(tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport))):
        raise ValidationFailed({field: "a template may not include or import another"})
    if any(tree.find_all(nodes.Block)):
        raise ValidationFailed({field: "a template may not define blocks"})
    try:
        unknown = sorted(jinja2.meta.find_undeclared_variables(tree) - names)
    except jinja2.TemplateSyntaxError as error:  # an unknown filter or test
        raise ValidationFailed({field: f"template does not compile: {error.message}"}) from None
    if unknown:
        scope = ", ".join(sorted(names))
        raise ValidationFailed({field: f"unknown name {unknown[0]} (in scope: {scope})"})
    for node in tree.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Test)):
        reached: Any = None
        if isinstance(node, nodes.Getattr):
            reached = node.attr
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            reached = node.arg.value
        elif isinstance(node, nodes.Filter | nodes.Test) and node.name == "attr":
            reached = next((a.value for a in node.args if isinstance(a, nodes.Const)), None)
        if _unsafe(reached):
            raise ValidationFailed({field: f"template reaches outside the sandbox ({reached})"})
    return tree


def _compile(
    env: jinja2.Environment, source: str, field: str, names: frozenset[str] = TEXT_NAMES
) -> jinja2.Template:
    """Check and compile a template (see `_probe`); `source` may also be a loader's name."""
    _check_source(env, source, field, names)
    try:
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as error:  # an unknown filter or test, too
        raise ValidationFailed({field: f"template does not compile: {error.message}"}) from None
    _probe(template, field)
    return template


def _probe(template: jinja2.Template, field: str) -> None:
    """Render on an empty payload: a sandbox refusal there is refused now (other render
    errors depend on the payload: they show at send)."""
    try:
        variables: dict[str, Any] = {
            "payload": {},
            "recipient": PLACEHOLDER_RECIPIENT,
            "locale": None,
        }
        "".join(template.root_render_func(template.new_context(variables, shared=True)))
    except jinja2.sandbox.SecurityError as error:
        raise ValidationFailed({field: f"template reaches outside the sandbox ({error})"}) from None
    except Exception:  # a payload-dependent error shows at send time
        return


def _uses_locale(env: jinja2.Environment, sources: Iterable[str]) -> bool:
    return any("locale" in jinja2.meta.find_undeclared_variables(env.parse(s)) for s in sources)


_MARKUP = ("{{", "{%", "{#")


# A plain substitution's parts: a text, the recipient, or a path of keys into the payload.
Part = str | tuple[str, ...] | None  # None: the recipient
_MISSING = object()


def _plain(tree: nodes.Template) -> list[Part] | None:
    """The parts of a template that only substitutes (`Hi {{ payload.user.name }}`), or None
    when it does anything else (filters, tests, loops, conditions, a key that is also a
    method of dict such as `items`): those are rendered by Jinja2."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    parts: list[Part] = []
    for node in tree.body[0].nodes:
        if isinstance(node, nodes.TemplateData):
            parts.append(node.data)
            continue
        keys: list[str] = []
        while isinstance(node, nodes.Getattr | nodes.Getitem):
            key: Any = None
            if isinstance(node, nodes.Getattr):
                key = node.attr
            elif isinstance(node.arg, nodes.Const):
                key = node.arg.value
            if not isinstance(key, str) or hasattr(dict, key):
                return None
            keys.append(key)
            node = node.node
        if isinstance(node, nodes.Name) and node.name == "payload":
            parts.append(tuple(reversed(keys)))
        elif isinstance(node, nodes.Name) and node.name == "recipient" and not keys:
            parts.append(None)
        else:
            return None
    return parts


def _substitute(parts: list[Part], payload: dict[str, Any], recipient: str) -> str | None:
    """A plain template's text (what Jinja2 renders: `str` of each value, a missing key
    empty), or None when a key meets something other than an object (Jinja2 decides)."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif part is None:
            out.append(recipient)
        else:
            value: Any = payload
            for key in part:
                if type(value) is not dict:
                    return None
                value = value.get(key, _MISSING)
                if value is _MISSING:
                    break
            out.append("" if value is _MISSING else str(value))
    return "".join(out)


class Texts:
    """Named text templates of one definition, rendered together.

    The hot path of a send: a template without markup is its text, computed once; a plain
    substitution is done without Jinja2 (what it would render, a few dict lookups); the
    others share one context, made without globals (none is offered anyway)."""

    def __init__(self, sources: dict[str, str], prefix: str):
        self.constants: dict[str, str] = {}
        self.plain: dict[str, list[Part]] = {}
        self.templates: dict[str, tuple[str, jinja2.Template]] = {}
        for name, source in sources.items():
            field = f"{prefix}{name}"
            template = _compile(_TEXT, source, field)
            parts = _plain(_TEXT.parse(source))
            if not any(mark in source for mark in _MARKUP):
                self.constants[name] = template.render()
            elif parts is not None:
                self.plain[name] = parts
            self.templates[name] = (field, template)
        self.uses_locale = _uses_locale(_TEXT, sources.values())

    def render(self, payload: dict[str, Any], recipient: str, locale: str | None) -> dict[str, str]:
        texts = dict(self.constants)
        context = None
        for name, (field, template) in self.templates.items():
            if name in texts:
                continue
            parts = self.plain.get(name)
            if parts is not None:
                text = _substitute(parts, payload, recipient)
                if text is not None:
                    texts[name] = text
                    continue
            if context is None:
                variables = {"payload": payload, "recipient": recipient, "locale": locale}
                context = template.new_context(variables, shared=True)
            try:
                texts[name] = "".join(template.root_render_func(context))
            except Exception as error:  # the sandbox's refusals included
                raise ValidationFailed({field: f"template failed: {error}"}) from None
        return texts


# --- the payload --------------------------------------------------------------------------


class DeclaredPayload(BaseModel):
    """A payload validated by its event's JSON Schema; the fields are the payload's keys."""

    model_config = ConfigDict(extra="allow")

    validator: ClassVar[Any]
    fast: ClassVar[Any]  # a jsonschema_rs validator (None: not installed)
    declared_schema: ClassVar[dict[str, Any]]

    @classmethod
    def model_validate(cls, obj: Any, **_: Any) -> DeclaredPayload:
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, dict):
            raise _validation_error(cls, [_line((), "must be an object", obj)])
        if cls.fast is not None and cls.fast.is_valid(obj):
            return cls._construct(obj)
        lines: list[InitErrorDetails] = []
        for error in cls.validator.iter_errors(obj):
            path = tuple(error.absolute_path)
            if error.validator == "required" and isinstance(error.instance, dict):
                lines.extend(
                    _line((*path, name), "Field required", None)
                    for name in error.validator_value
                    if name not in error.instance
                )
            else:
                lines.append(_line(path, error.message, error.instance))
        if lines:
            raise _validation_error(cls, lines)
        return cls._construct(obj)

    @classmethod
    def _construct(cls, obj: dict[str, Any]) -> DeclaredPayload:
        model = cls.__new__(cls)
        object.__setattr__(model, "__dict__", {})
        object.__setattr__(model, "__pydantic_extra__", dict(obj))
        object.__setattr__(model, "__pydantic_fields_set__", set())
        object.__setattr__(model, "__pydantic_private__", None)
        return model

    @classmethod
    def model_json_schema(cls, *_: Any, **__: Any) -> dict[str, Any]:
        return cls.declared_schema


def _line(loc: tuple[Any, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("json_schema", "{reason}", {"reason": message}),
        loc=loc,
        input=value,
    )


def _validation_error(cls: type, lines: list[InitErrorDetails]) -> ValidationError:
    return ValidationError.from_exception_data(cls.__name__, lines)


def payload_of(model: BaseModel) -> dict[str, Any]:
    """The payload as a dict (a declared payload's own, a pydantic model's dump)."""
    if isinstance(model, DeclaredPayload):
        return model.__pydantic_extra__ or {}
    return model.model_dump(mode="json")


def _payload_class(event_type: str, schema: dict[str, Any]) -> type[DeclaredPayload]:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise ValidationFailed(
            {"payloadSchema": f"not a valid JSON Schema at {where}: {error.message}"}
        ) from None
    remote = sorted(_remote_refs(schema))
    if remote:
        raise ValidationFailed({"payloadSchema": f"only local $ref (#...) is allowed: {remote[0]}"})
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    fast = None
    if FAST_SCHEMAS:
        try:
            fast = jsonschema_rs.validator_for(schema, validate_formats=True)
        except Exception:  # a schema only jsonschema reads: it alone answers
            fast = None
    name = "Payload_" + "".join(c if c.isalnum() else "_" for c in event_type)
    attributes = {"validator": validator, "fast": fast, "declared_schema": schema}
    return type(name, (DeclaredPayload,), attributes)


def _remote_refs(schema: Any) -> set[str]:
    """Every `$ref` / `$dynamicRef` that points outside the schema (none is ever fetched)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    found.add(value)
            else:
                found |= _remote_refs(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _remote_refs(item)
    return found


# --- compile ------------------------------------------------------------------------------


def _key(source: str, kind: str) -> Callable[[str, Any], str]:
    texts = Texts({"key": source}, f"{kind}.")

    def key(recipient: str, model: Any) -> str:
        return texts.render(payload_of(model), recipient, None)["key"].strip()

    return key


def _guard(path: str) -> Callable[[str, Any], bool]:
    parts = path.split(".")

    def guard(recipient: str, model: Any) -> bool:
        value: Any = payload_of(model)
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        return value is not None and str(value) == recipient

    return guard


def _in_app(spec: InAppSpec) -> Callable[..., InAppContent]:
    sources = {"title": spec.title, "body": spec.body, "ctaUrl": spec.cta_url}
    texts = Texts({**sources, "ctaLabel": spec.cta_label}, "inApp.")

    def content(recipient: str, model: Any, locale: str | None) -> InAppContent:
        text = texts.render(payload_of(model), recipient, locale)
        return InAppContent(
            title=text["title"].strip(),
            body=text["body"],
            cta_url=text["ctaUrl"].strip(),
            cta_label=text["ctaLabel"].strip(),
        )

    if texts.uses_locale:

        def localized(recipient: str, model: Any, *, locale: str | None = None) -> InAppContent:
            return content(recipient, model, locale)

        return localized

    def plain(recipient: str, model: Any) -> InAppContent:  # no locale: no read of it
        return content(recipient, model, None)

    return plain


def _email(spec: EmailSpec) -> tuple[Callable[..., EmailContent], jinja2.Environment]:
    files = {"email.txt": spec.text}
    if spec.html is not None:
        files["email.html"] = spec.html
    env = _environment(
        loader=jinja2.DictLoader(files),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
    )
    subject = Texts({"subject": spec.subject}, "email.")
    for name, source in files.items():
        field = "email." + name.removeprefix("email.").replace("txt", "text")
        _compile(env, source, field, EMAIL_NAMES)
        env.get_template(name)  # compiled once more, kept by the loader for every send
    path = "email.html" if spec.html is not None else "email.txt"

    def email(recipient: str, model: Any, *, locale: str | None = None) -> EmailContent:
        payload = payload_of(model)
        title = subject.render(payload, recipient, locale)["subject"]
        return EmailContent(
            subject=" ".join(title.split()),
            template_path=path,
            variables={"payload": payload, "recipient": recipient},
        )

    return email, env


def compile_declared(
    event_type: str,
    body: EventTypeBody,
    *,
    version: int | None = None,
    base_dir: Path = Path("."),
) -> RegisteredEvent:
    """A declarative definition as a registered event (ValidationFailed naming the field)."""
    if event_type.startswith(RESERVED_PREFIX):
        raise ValidationFailed({"type": f"the {RESERVED_PREFIX} prefix is tenantd's own"})
    channels = tuple(body.default_channels)
    if len(set(channels)) != len(channels):
        raise ValidationFailed({"defaultChannels": "a channel is listed twice"})
    if "email" in channels and body.email is None:
        raise ValidationFailed({"email": "the email channel needs email templates"})
    schema = _payload_class(event_type, body.payload_schema)
    email, environment = _email(body.email) if body.email is not None else (None, None)
    dedup = throttle = digest = None
    if body.dedup is not None:
        dedup = Dedup(key=_key(body.dedup.key, "dedup"), window_seconds=body.dedup.window_seconds)
    if body.throttle is not None:
        throttle = Throttle(
            key=_key(body.throttle.key, "throttle"),
            limit=body.throttle.limit,
            window_seconds=body.throttle.window_seconds,
        )
    if body.digest is not None:
        digest = Digest(
            key=_key(body.digest.key, "digest"),
            window_seconds=body.digest.window_seconds,
            max_items=body.digest.max_items,
        )
    guard = body.self_action_guard
    definition = EventDefinition(
        type=event_type,
        schema=schema,
        default_channels=channels,
        dedup=dedup,
        self_action_guard=_guard(guard.payload_field) if guard is not None else None,
        in_app=_in_app(body.in_app),
        email=email,
        digest=digest,
        throttle=throttle,
        critical=body.critical,
        label=body.label,
        description=body.description,
    )
    return RegisteredEvent(
        definition=definition,
        base_dir=base_dir,
        environment=environment,
        version=version,
        declared=body.model_dump(mode="json", by_alias=True, exclude_none=True),
    )


# --- the catalog file ---------------------------------------------------------------------


def read_catalog(path: str | Path) -> list[RegisteredEvent]:
    """Every entry of a TENANTD_EVENT_CATALOG file (JSON or YAML: a list of definitions,
    each with its `type`), compiled; RegistryError naming the entry when one is unusable."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        entries = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise RegistryError(f"event catalog {file}: cannot read it ({error})") from None
    if not isinstance(entries, list):
        raise RegistryError(f"event catalog {file}: must be a list of event definitions")
    events: list[RegisteredEvent] = []
    for index, entry in enumerate(entries):
        name = entry.get("type") if isinstance(entry, dict) else None
        where = f"event catalog {file}: entry {index}" + (f" ({name})" if name else "")
        try:
            parsed = CatalogEntry.model_validate(entry)
            events.append(compile_declared(parsed.type, parsed, base_dir=file.parent))
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "entry"
            raise RegistryError(f"{where}: {field}: {first['msg']}") from None
        except ValidationFailed as error:
            problems = "; ".join(f"{k}: {v}" for k, v in error.fields.items())
            raise RegistryError(f"{where}: {problems}") from None
    return events


def load_catalog(registry: EventRegistry, path: str | None) -> None:
    """Add the catalog file's events to the deployment's (a type twice is an error)."""
    if not path:
        return
    for event in read_catalog(path):
        registry.add(event)
