"""Event definitions and the registry built from TENANTD_EVENT_MODULES at start-up.

An application defines its events in modules that expose a list `EVENTS`; tenantd's own
(`tenantd.notifications.tenancy`, off unless TENANTD_BUILTIN_NOTIFICATIONS) use the reserved
`tenantd.` prefix, which an application's module may not.
Every definition is checked once, at start-up: a duplicate type, an unknown channel, a missing
render function or a missing email template is an error that names the event.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel

from tenantd.email.templates import Brand, mail_environment
from tenantd.errors import NotFound

CHANNELS = ("in_app", "email", "sse", "web_push")
DEFAULT_CHANNELS = ("in_app", "email")
_TYPE_PATTERN = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
RESERVED_PREFIX = "tenantd."  # the built-in events' names


@dataclass(frozen=True)
class Dedup:
    """A second notification with the same key inside `window_seconds` is dropped."""

    key: Callable[[str, Any], str]
    window_seconds: int


@dataclass(frozen=True)
class Throttle:
    """At most `limit` notifications per key in a fixed window of `window_seconds`; the ones
    over it are kept with every delivery row `suppressed`, reason `throttled`."""

    key: Callable[[str, Any], str]
    limit: int
    window_seconds: int


@dataclass(frozen=True)
class Digest:
    """Sends with the same key inside `window_seconds` become one notification per channel
    when the window closes (at most `max_items` items). Declared here; batching is not
    implemented yet (see docs/notifications.md): a digest event is delivered like any other."""

    key: Callable[[str, Any], str]
    window_seconds: int
    max_items: int = 50


@dataclass(frozen=True)
class InAppContent:
    title: str
    body: str = ""
    cta_url: str = ""
    cta_label: str = ""


@dataclass(frozen=True)
class EmailContent:
    subject: str
    template_path: str  # Jinja2 template relative to the defining module's folder
    variables: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventDefinition:
    type: str
    schema: builtins.type[BaseModel]
    default_channels: tuple[str, ...] = DEFAULT_CHANNELS
    dedup: Dedup | None = None
    # Called with (recipient user id as a string, validated payload); True skips the send.
    self_action_guard: Callable[[str, Any], bool] | None = None
    # (recipient, payload); a function that also takes a `locale` keyword gets the
    # recipient's `users.locale` (None: not set), see `render`.
    in_app: Callable[..., InAppContent] | None = None
    email: Callable[..., EmailContent] | None = None
    # Beyond (issue 18)
    digest: Digest | None = None
    throttle: Throttle | None = None
    critical: bool = False  # bypasses preferences, quiet hours and digests, never suppression
    # Shown instead of the type on the preferences answer and page: a text, or one per
    # locale ({"en": ..., "fr": ...}); None: the type itself.
    label: str | dict[str, str] | None = None
    description: str | dict[str, str] | None = None


def localized_text(value: str | dict[str, str] | None, locale: str | None) -> str | None:
    """A text, or the locale's entry of a per-locale one (its language, then English, then
    the first given)."""
    if value is None or isinstance(value, str):
        return value
    if not value:
        return None
    if locale:
        if locale in value:
            return value[locale]
        language = locale.split("-")[0]
        if language in value:
            return value[language]
    return value.get("en") or next(iter(value.values()))


@functools.lru_cache(maxsize=1024)
def wants_locale(function: Callable[..., Any]) -> bool:
    """Whether a render function takes a `locale` keyword (or **kwargs)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == "locale" and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


def render(
    function: Callable[..., Any], recipient: str, model: BaseModel, locale: str | None
) -> Any:
    """Call an in_app / email render function, with `locale=` when it takes one."""
    if wants_locale(function):
        return function(recipient, model, locale=locale)
    return function(recipient, model)


class RegistryError(ValueError):
    """An event definition is unusable; raised at start-up."""


class UnknownEventType(NotFound):
    code = "NOT_FOUND"
    message = "Unknown notification event type"


@dataclass(frozen=True)
class RegisteredEvent:
    definition: EventDefinition
    base_dir: Path  # the defining module's folder: email templates are relative to it
    # Declared events (no Python): where `EmailContent.template_path` is looked up, and
    # the stored version the definition was compiled from (None: defined in Python or in
    # the catalog file, i.e. with the deployment).
    environment: jinja2.Environment | None = None
    version: int | None = None
    declared: dict[str, Any] | None = None  # the declarative definition as given (camelCase)

    @property
    def type(self) -> str:
        return self.definition.type

    @property
    def stored(self) -> bool:
        """Declared over HTTP (table event_definitions): replaceable and removable there."""
        return self.version is not None


class EventRegistry:
    """Event type -> definition, in registration order: those of the deployment (Python
    modules, then the catalog file), then those stored over HTTP (swapped as a whole by the
    event-definition feed, so a reader never sees half a reload)."""

    def __init__(self) -> None:
        self._events: dict[str, RegisteredEvent] = {}
        self._stored: dict[str, RegisteredEvent] = {}
        self.version = 0  # bumped by every change: answers built from the registry compare it
        # The stored types' loader (notifications/definitions.py): one load at a time, so a
        # slower, older read never replaces a newer one; and the (type, version) pairs this
        # code cannot compile (stored by another version of tenantd), logged once, not at
        # every reload (the type keeps its last usable version, if any).
        self.stored_load_lock = asyncio.Lock()
        self.unusable_stored: set[tuple[str, int]] = set()

    def __contains__(self, event_type: object) -> bool:
        return event_type in self._events or event_type in self._stored

    def __len__(self) -> int:
        return len(self._events) + len(self._stored)

    def events(self) -> list[RegisteredEvent]:
        return [*self._events.values(), *self._stored.values()]

    def get(self, event_type: str) -> RegisteredEvent:
        event = self._events.get(event_type) or self._stored.get(event_type)
        if event is None:
            raise UnknownEventType(f"Unknown notification event type: {event_type}")
        return event

    def deployed(self, event_type: str) -> bool:
        """Defined with the deployment (a Python module or the catalog file)."""
        return event_type in self._events

    def stored_events(self) -> dict[str, RegisteredEvent]:
        return dict(self._stored)

    def replace_stored(self, events: dict[str, RegisteredEvent]) -> None:
        """Swap in the stored definitions (a type the deployment defines is never shadowed)."""
        self._stored = {name: e for name, e in events.items() if name not in self._events}
        self.version += 1

    def add(self, event: RegisteredEvent) -> None:
        """Add an already checked deployment event (the catalog file's)."""
        if event.type in self._events:
            raise RegistryError(f"event {event.type}: duplicate event type")
        self._events[event.type] = event
        self.version += 1

    def register(self, definition: EventDefinition, *, base_dir: Path | str) -> None:
        """Check one definition and add it (RegistryError naming the event if unusable)."""
        if not isinstance(definition, EventDefinition):
            raise RegistryError(f"EVENTS entry is not an EventDefinition: {definition!r}")
        name = definition.type
        if not isinstance(name, str) or not _TYPE_PATTERN.match(name):
            raise RegistryError(f"event {name!r}: type must be a dot-separated name")
        if name in self._events:
            raise RegistryError(f"event {name}: duplicate event type")
        if not (isinstance(definition.schema, type) and issubclass(definition.schema, BaseModel)):
            raise RegistryError(f"event {name}: schema must be a pydantic model class")
        channels = tuple(definition.default_channels)
        if not channels:
            raise RegistryError(f"event {name}: default_channels is empty")
        for channel in channels:
            if channel not in CHANNELS:
                raise RegistryError(
                    f"event {name}: unknown channel {channel!r} (known: {', '.join(CHANNELS)})"
                )
        if len(set(channels)) != len(channels):
            raise RegistryError(f"event {name}: a channel is listed twice")
        if definition.in_app is None:
            raise RegistryError(f"event {name}: in_app render function is required")
        if definition.dedup is not None and (
            not callable(definition.dedup.key) or int(definition.dedup.window_seconds) <= 0
        ):
            raise RegistryError(f"event {name}: dedup needs a key function and a positive window")
        throttle = definition.throttle
        if throttle is not None and (
            not callable(throttle.key)
            or int(throttle.limit) <= 0
            or int(throttle.window_seconds) <= 0
        ):
            raise RegistryError(
                f"event {name}: throttle needs a key function, a positive limit and window"
            )
        digest = definition.digest
        if digest is not None and (
            not callable(digest.key)
            or int(digest.window_seconds) <= 0
            or int(digest.max_items) <= 0
        ):
            raise RegistryError(
                f"event {name}: digest needs a key function, a positive window and max_items"
            )
        base = Path(base_dir)
        if "email" in channels:
            if definition.email is None:
                raise RegistryError(f"event {name}: email channel without an email render function")
            _check_template(definition, base)
        self._events[name] = RegisteredEvent(definition=definition, base_dir=base)
        self.version += 1


def load_registry(module_names: Iterable[str]) -> EventRegistry:
    """Import every module of TENANTD_EVENT_MODULES and register its EVENTS."""
    registry = EventRegistry()
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise RegistryError(f"event module {module_name}: cannot import ({error})") from error
        events = getattr(module, "EVENTS", None)
        if not isinstance(events, (list, tuple)):
            raise RegistryError(f"event module {module_name}: has no list EVENTS")
        own = module_name.startswith("tenantd.")
        for definition in events:
            name = getattr(definition, "type", None)
            if not own and isinstance(name, str) and name.startswith(RESERVED_PREFIX):
                raise RegistryError(f"event {name}: the {RESERVED_PREFIX} prefix is tenantd's own")
            registry.register(definition, base_dir=module_base_dir(module))
    return registry


def module_base_dir(module: types.ModuleType) -> Path:
    file = getattr(module, "__file__", None)
    if not file:
        raise RegistryError(f"event module {module.__name__}: has no file to resolve templates")
    return Path(file).resolve().parent


# --- email templates ----------------------------------------------------------------------


_ENVIRONMENTS: dict[tuple[Path, Brand], jinja2.Environment] = {}


def template_environment(base_dir: Path, brand: Brand) -> jinja2.Environment:
    """A Jinja2 environment rooted at the defining module's folder (no escaping out of it),
    in `brand`'s layout."""
    env = _ENVIRONMENTS.get((base_dir, brand))
    if env is None:
        # Event templates may extend the mail layout too (`{% extends "_layout.html" %}`).
        env = mail_environment([base_dir], brand, extensions=("html", "htm"))
        _ENVIRONMENTS[base_dir, brand] = env
    return env


def _check_template(definition: EventDefinition, base_dir: Path) -> None:
    """Render the email function with a placeholder payload and check its template exists.

    A render function that cannot run on placeholders is checked at send time instead.
    """
    assert definition.email is not None
    try:
        probe = _probe(definition.schema)
        content = render(definition.email, "00000000-0000-0000-0000-000000000000", probe, None)
    except Exception:
        return
    if not isinstance(content, EmailContent):
        raise RegistryError(f"event {definition.type}: email render must return EmailContent")
    try:
        template_environment(base_dir, Brand()).get_template(content.template_path)
    except jinja2.TemplateNotFound:
        raise RegistryError(
            f"event {definition.type}: email template {content.template_path} not found"
            f" in {base_dir}"
        ) from None
    except jinja2.TemplateSyntaxError as error:
        raise RegistryError(
            f"event {definition.type}: email template {content.template_path}: {error}"
        ) from None


def _placeholder(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _placeholder(options[0]) if options else None
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        return []
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return _probe(annotation)
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, (int, float)):
            return annotation(0)
        if issubclass(annotation, str):
            return ""
    return None


def _probe(schema: type[BaseModel]) -> BaseModel:
    values = {name: _placeholder(info.annotation) for name, info in schema.model_fields.items()}
    return schema.model_construct(**values)
