"""Settings: one pydantic-settings model, loaded once from the environment (and an optional
env file), then frozen.

This kernel module holds the mechanism and what every layer shares: the `Section` base, the
parsers of a value (`Flag`, `Number`, `Whole`, `Names`, ...; each error names its variable),
the root `Settings` with the deployment's own fields and the generic sections (`web`,
`database`, `log`). Each other section lives beside the package that reads it (`JobSettings`
in `jobs/`, `IdentitySettings` in `identity/`, ...) and `tenantd.app.settings.AppSettings`
composes them; a package reads its own with `settings.section(JobSettings)`.

Every field reads one environment variable, named by its alias, and says what it means in its
description: `docs/configuration.md` is generated from them (`tenantd.app.manual`).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from aiohttp import web
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

log = logging.getLogger(__name__)


class SettingsError(ValueError):
    """A configuration value is malformed."""


# -- the parsers of one value: each raises ValueError without the variable's name, which
# `load` puts in front ("DB_POOL_MAX must be an integer, got '1.5'") ---------------------------


def parse_flag(value: Any) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"must be a boolean (true/false), got {value!r}")


def at_least(minimum: float) -> Callable[[Any], float]:
    """A number, finite and >= `minimum`."""

    def parse(value: Any) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value))
            except ValueError:
                raise ValueError(f"must be a number, got {value!r}") from None
        if not math.isfinite(number) or number < minimum:
            raise ValueError(f"must be a number >= {minimum}, got {value!r}")
        return number

    return parse


def whole_at_least(minimum: int) -> Callable[[Any], int]:
    """A whole number >= `minimum` (`12` or `12.0`; never `1.5`)."""
    number = at_least(minimum)

    def parse(value: Any) -> int:
        parsed = number(value)
        if parsed != int(parsed):
            raise ValueError(f"must be an integer, got {value!r}")
        return int(parsed)

    return parse


def names(value: Any) -> tuple[str, ...]:
    """A comma list (blank items dropped)."""
    if isinstance(value, tuple | list):
        return tuple(value)
    return tuple(item.strip() for item in str(value).split(",") if item.strip())


def networks(value: Any) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma list of addresses or CIDRs."""
    found = []
    for item in names(value):
        try:
            found.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f": not an address or CIDR: {item}") from None
    return tuple(found)


def one_of(
    *choices: str, refusal: str = "must be {choices}, got {value!r}"
) -> Callable[[Any], str]:
    """One of `choices`, compared lower-cased; `refusal` formats the error from `choices`
    (joined by |) and the lower-cased `value`."""

    def parse(value: Any) -> str:
        lowered = str(value).strip().lower()
        if lowered not in choices:
            raise ValueError(refusal.format(choices=" | ".join(choices), value=lowered))
        return lowered

    return parse


def stripped(value: Any) -> str:
    return str(value).strip()


def url_base(value: Any) -> str:
    """A URL without its trailing slash (paths are appended to it)."""
    return str(value).strip().rstrip("/")


Flag = Annotated[bool, BeforeValidator(parse_flag)]
Names = Annotated[tuple[str, ...], BeforeValidator(names)]
Networks = Annotated[
    tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...], BeforeValidator(networks)
]
Text = Annotated[str, BeforeValidator(stripped)]
UrlBase = Annotated[str, BeforeValidator(url_base)]
Positive = Annotated[int, BeforeValidator(whole_at_least(1))]
Count = Annotated[int, BeforeValidator(whole_at_least(0))]
# Lengths of time in seconds (fractions allowed): any, or an interval something waits between
# rounds, where zero would spin.
Seconds = Annotated[float, BeforeValidator(at_least(0.0))]
MIN_INTERVAL = 0.01
Interval = Annotated[float, BeforeValidator(at_least(MIN_INTERVAL))]


def env(name: str, description: str | None = None, **kwargs: Any) -> Any:
    """A field read from the variable `name`; `description` is its line in the manual (None:
    it shares the meaning of the field above it)."""
    return Field(validation_alias=name, description=description, **kwargs)


class Section(BaseModel):
    """A group of settings. Its fields read the variables named by their aliases from the
    whole environment it is given; a blank value is the field's default."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    title: ClassVar[str] = ""  # the manual's heading of the section

    @classmethod
    def variables(cls) -> Iterator[tuple[str, FieldInfo]]:
        """(variable, field) of each field, in order."""
        for info in cls.model_fields.values():
            if isinstance(info.validation_alias, str):
                yield info.validation_alias, info

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> dict[str, Any]:
        """The values this section reads, blanks left out (they take the default)."""
        return {
            name: environment[name]
            for name, _info in cls.variables()
            if environment.get(name, "").strip()
        }

    def switches(self) -> dict[str, Any]:
        """What a server reports it runs with (ops/instances.py): the fields marked
        `switch`, by variable; a section adds derived ones by overriding this."""
        reported: dict[str, Any] = {}
        for field_name, info in type(self).model_fields.items():
            extra = info.json_schema_extra
            if isinstance(extra, dict) and extra.get("switch") and info.validation_alias:
                value = getattr(self, field_name)
                reported[str(info.validation_alias)] = (
                    ",".join(value) if isinstance(value, tuple) else value
                )
        return reported


SWITCH: dict[str, Any] = {"switch": True}
DERIVED: dict[str, Any] = {"derived": True}  # the manual shows *unset*: its meaning says from what


# -- the generic sections ------------------------------------------------------------------


def _origins(value: Any) -> tuple[str, ...]:
    """ALLOWED_ORIGINS as browsers write an Origin header: lowercase scheme and host, the
    port only when not the scheme's default, no path (`https://App.example.com:443/` reads
    `https://app.example.com`), so the CSRF check and CORS compare strings."""
    default_ports = {"http": 80, "https": 443}
    origins: list[str] = []
    for item in names(value):
        parts = urlsplit(item.lower())
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in default_ports or not parts.hostname or port == -1:
            raise ValueError(f": not an http(s) origin: {item}")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        suffix = f":{port}" if port is not None and port != default_ports[parts.scheme] else ""
        origins.append(f"{parts.scheme}://{host}{suffix}")
    return tuple(dict.fromkeys(origins))


def public_base_url(environment: Mapping[str, str]) -> str:
    """PUBLIC_BASE_URL of a raw environment (sections that derive a default from it)."""
    return (environment.get("PUBLIC_BASE_URL", "").strip() or DEFAULT_BASE_URL).rstrip("/")


DEFAULT_BASE_URL = "http://127.0.0.1:8080"


class WebSettings(Section):
    """Cookies and the origins a browser may call from."""

    title: ClassVar[str] = "Addresses and cookies"

    cookie_secure: Flag = env(
        "COOKIE_SECURE",
        "Secure attribute on cookies (scripts/run sets false for plain http).",
        default=True,
        json_schema_extra=SWITCH,
    )
    allowed_origins: Annotated[tuple[str, ...], BeforeValidator(_origins)] = env(
        "ALLOWED_ORIGINS",
        "Comma list of origins allowed to make cookie-authenticated mutations (CSRF); default:"
        " origin of PUBLIC_BASE_URL. Their pages also get credentialed CORS on /api/v1/*,"
        " /auth/*, /static/* and the JWKS.",
        default=(),
        examples=["https://app.example.com"],
        json_schema_extra=DERIVED,
    )
    hosted_pages: Flag = env(
        "TENANTD_UI",
        "Hosted pages (/signup, /login, /account, /notifications, ...) and"
        " /static/tenantd.js. false: those paths answer 404 (API only, for teams with their"
        " own frontend; point PUBLIC_BASE_URL at that frontend).",
        default=True,
        json_schema_extra=SWITCH,
    )
    session_cookie_domain: str | None = env(
        "SESSION_COOKIE_DOMAIN",
        "Domain of the access-token cookie (auth_token), so your app's server on a sibling"
        " subdomain receives it too, e.g. example.com when tenantd is auth.example.com; unset:"
        " host-only.",
        default=None,
        examples=["example.com"],
    )

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> dict[str, Any]:
        values = super().from_environment(environment)
        base = urlsplit(public_base_url(environment))
        values.setdefault("ALLOWED_ORIGINS", f"{base.scheme}://{base.netloc}")
        raw = values.pop("SESSION_COOKIE_DOMAIN", "")
        domain = raw.strip().lower().lstrip(".")
        host = (base.hostname or "").lower()
        if domain and ("." not in domain or not (host == domain or host.endswith("." + domain))):
            raise SettingsError(
                "SESSION_COOKIE_DOMAIN must be PUBLIC_BASE_URL's host or a parent domain of it"
                f" (e.g. example.com for auth.example.com), got {raw!r}"
            )
        if domain:
            values["SESSION_COOKIE_DOMAIN"] = domain
        return values


class DatabaseSettings(Section):
    """Where the data lives and how many connections a process holds."""

    title: ClassVar[str] = "Database"

    url: str | None = env(
        "DATABASE_URL",
        "Database. Unset: a private PostgreSQL cluster under $TENANTD_DATA_DIR/pg (development).",
        default=None,
        examples=["postgresql://tenantd@127.0.0.1:5432/tenantd"],
    )
    sql_dir: Path | None = env(
        "TENANTD_SQL_DIR",
        "Folder of the SQL migrations `tenantd migrate` applies. Unset: the sql/ folder"
        " shipped with tenantd.",
        default=None,
    )
    pool_min: Positive = env(
        "DB_POOL_MIN",
        "Database pool size per process. Outside it, each process also holds two connections"
        " for the relay that publishes what commits announce (its publisher and its liveness"
        " check), one LISTEN connection (TENANTD_BUS=postgres) and (QUEUES_ENABLED=true) one"
        " for job lease heartbeats, so an exhausted pool neither delays an announcement nor"
        " costs a running job its lease.",
        default=2,
    )
    pool_max: Positive = env("DB_POOL_MAX", default=10)
    replica_urls: Names = env(
        "DATABASE_REPLICA_URLS",
        "Streaming replicas (comma-separated) for the reads that tolerate lag: the inbox list and"
        " unread count, the events API, the audit log and the sessions list; everything else"
        " stays on DATABASE_URL. A replica that fails or stops answering is skipped (the primary"
        " answers) until it answers again. See docs/scaling.md.",
        default=(),
    )
    replica_wait_ms: Count = env(
        "DATABASE_REPLICA_WAIT_MS",
        "A caller reads its own writes: a read on a replica first waits up to this long (ms) for"
        " the replica to replay them, then reads from the primary instead.",
        default=200,
    )


_bus = one_of("postgres", "nats", "redis", refusal="must be postgres, nats or redis")


class BusSettings(Section):
    """The bus every instance hears announcements on (SSE fan-out, cache invalidation,
    revocations, key changes, new event types)."""

    title: ClassVar[str] = "Bus"

    kind: Annotated[str, BeforeValidator(_bus)] = env(
        "TENANTD_BUS",
        "The bus: `postgres` (LISTEN/NOTIFY on the database, one listening connection per"
        " process; nothing else to run), `nats` (NATS at NATS_URL: core subjects, and a"
        " JetStream stream for revocations, cache invalidations, key and event-type changes;"
        " the server runs with `-js`) or `redis`"
        " (Redis pub/sub at REDIS_URL, sharded where the server offers it). With nats or redis"
        " no connection holds a LISTEN: each instance publishes what its commits announce. A"
        " send is accepted while the bus is down; delivery catches up. See docs/scaling.md.",
        default="postgres",
        json_schema_extra=SWITCH,
    )
    nats_url: str = env(
        "NATS_URL",
        "The NATS server(s) of TENANTD_BUS=nats (JetStream enabled).",
        default="nats://127.0.0.1:4222",
    )
    redis_url: str = env(
        "REDIS_URL",
        "The Redis server of TENANTD_BUS=redis.",
        default="redis://127.0.0.1:6379/0",
    )


_log_format = one_of("console", "json", refusal="must be console or json")


class LogSettings(Section):
    """What the process logs, and how."""

    title: ClassVar[str] = "Logging"

    level: Annotated[str, BeforeValidator(lambda v: str(v).strip().lower())] = env(
        "LOG_LEVEL",
        "Logging: debug, info, warning, error; console or json (one object per line).",
        default="info",
    )
    format: Annotated[str, BeforeValidator(_log_format)] = env("LOG_FORMAT", default="console")


def _secret_key(data_dir: Path, given: str | None) -> str:
    if given:
        if len(given) < 32:
            raise SettingsError("SECRET_KEY must be at least 32 characters")
        return given
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    # Create with 0600 from the start so the key is never world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    log.warning("SECRET_KEY is not set; generated one into %s", path)
    return key


S = TypeVar("S", bound=Section)
M = TypeVar("M", bound="Settings")


class Environment(PydanticBaseSettingsSource):
    """One flat mapping of variables (an env file under the process environment): the root
    reads its own fields by alias, each section is handed the whole mapping and keeps what
    its fields name."""

    def __init__(self, settings_cls: type[BaseSettings], environment: Mapping[str, str]):
        super().__init__(settings_cls)
        self.environment = environment

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole mapping

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field_name, info in self.settings_cls.model_fields.items():
            kind = info.annotation
            if isinstance(kind, type) and issubclass(kind, Section):
                values[field_name] = kind.from_environment(self.environment)
            elif isinstance(info.validation_alias, str):
                raw = self.environment.get(info.validation_alias, "")
                if raw.strip():
                    values[info.validation_alias] = raw
        return values


class Settings(BaseSettings):
    """The deployment's own fields and the generic sections; `AppSettings` adds the rest."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=True)

    data_dir: Path = env(
        "TENANTD_DATA_DIR",
        "Folder for the private cluster, the generated secret key and the `file` mail provider.",
        default=Path("var"),
    )
    secret_key: str = env(
        "SECRET_KEY",
        "Pepper of stored token hashes and key of the signing keys' encryption at rest (and"
        " the access-token key with ACCESS_TOKEN_ALG=HS256), >= 32 chars; the same on every"
        " instance. Unset: generated into $TENANTD_DATA_DIR/secret_key with a warning.",
        default="",
        repr=False,
    )
    public_base_url: UrlBase = env(
        "PUBLIC_BASE_URL",
        "Base of links in emails and of OpenID Connect redirect URIs.",
        default=DEFAULT_BASE_URL,
        json_schema_extra=SWITCH,
    )
    web: WebSettings = Field(default_factory=WebSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    bus: BusSettings = Field(default_factory=BusSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, Environment(settings_cls, os.environ)

    _by_kind: dict[type[Section], Section] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        self._by_kind = {type(section): section for section in self.sections()}
        data_dir = self.data_dir.absolute()
        object.__setattr__(self, "data_dir", data_dir)
        object.__setattr__(self, "secret_key", _secret_key(data_dir, self.secret_key or None))

    def sections(self) -> Iterator[Section]:
        for field_name in type(self).model_fields:
            value = getattr(self, field_name)
            if isinstance(value, Section):
                yield value

    def section(self, kind: type[S]) -> S:
        """This configuration's section of type `kind` (composed in `tenantd.app`)."""
        # The index read from pydantic's store of private attributes: `self._by_kind` goes
        # through BaseModel.__getattr__ (~2 us, against ~0.1), and every request reads sections.
        private = self.__pydantic_private__
        found = private["_by_kind"].get(kind) if private else None
        if not isinstance(found, kind):
            raise LookupError(f"{type(self).__name__} has no {kind.__name__} section")
        return found

    def replaced(self: M, *sections: Section, **fields: Any) -> M:
        """A copy with these sections (by type) and root fields replaced (tests, and the
        CLI's queue mode chosen by the running instances)."""
        update = dict(fields)
        for new in sections:
            for field_name in type(self).model_fields:
                if type(getattr(self, field_name)) is type(new):
                    update[field_name] = new
        return self.model_copy(update=update).indexed()

    def indexed(self: M) -> M:
        """This object with its index of sections by type rebuilt (a copy shares the old)."""
        self._by_kind = {type(section): section for section in self.sections()}
        return self

    def switched(self: M, variable: str, value: Any) -> M:
        """A copy with the field read from `variable` set to `value` (the CLI's queue mode,
        chosen by the running instances)."""
        for section in self.sections():
            for name, info in type(section).model_fields.items():
                if info.validation_alias == variable:
                    return self.replaced(section.model_copy(update={name: value}))
        raise LookupError(f"no setting reads {variable}")

    def switches(self) -> dict[str, Any]:
        """Every section's switches (and the root's), by variable."""
        reported: dict[str, Any] = {"PUBLIC_BASE_URL": self.public_base_url}
        for section in self.sections():
            reported.update(section.switches())
        return reported

    def __repr__(self) -> str:  # never print secrets
        return f"{type(self).__name__}(data_dir={self.data_dir!s})"


def read_env_file(path: str | Path) -> dict[str, str]:
    """Parse a KEY=value file (comments, blank lines, optional quotes, optional `export`)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].strip()
        if "=" not in line:
            raise SettingsError(f"{path}:{number}: expected KEY=value")
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def environment(
    env_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The process environment (or `environ`) over the env file's variables."""
    found: dict[str, str] = {}
    if env_file is not None:
        found.update(read_env_file(env_file))
    found.update(os.environ if environ is None else environ)
    return found


def load(
    model: type[M], env_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> M:
    """Build `model` from the environment; a bad value raises SettingsError naming its
    variable (the first one, as start-up reports one line)."""
    source = Environment(model, environment(env_file, environ))
    try:
        return model.model_validate(source())
    except ValidationError as error:
        raise SettingsError(_message(error)) from None


def validated(kind: type[S], environment: Mapping[str, str]) -> S:
    """One section from a raw environment (a tool, a test), its errors as `load`'s."""
    try:
        return kind.model_validate(kind.from_environment(environment))
    except ValidationError as error:
        raise SettingsError(_message(error)) from None


def _message(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, SettingsError):
        return str(cause)
    name = str(first["loc"][-1]) if first["loc"] else "settings"
    if isinstance(cause, ValueError):
        text = str(cause)
        return f"{name}{text}" if text.startswith(":") else f"{name} {text}"
    return f"{name}: {first['msg']}, got {first.get('input')!r}"


SETTINGS = web.AppKey("settings", Settings)


# -- hosts ----------------------------------------------------------------------------------


def is_ip_address(host: str | None) -> bool:
    try:
        ipaddress.ip_address((host or "").strip("[]"))
    except ValueError:
        return False
    return True
