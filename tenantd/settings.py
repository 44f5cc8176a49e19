"""Settings: loaded once from the environment (and an optional env file), then frozen."""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

log = logging.getLogger(__name__)

DEFAULT_PUSH_HOSTS = (
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "*.push.apple.com",
    "*.notify.windows.com",
)


class SettingsError(ValueError):
    """A configuration value is malformed."""


def _bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise SettingsError(f"{name} must be a boolean (true/false), got {value!r}")


def env_number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0) -> float:
    """The one parser of numeric knobs: unset or blank is `default`; anything that is not a
    number, or is below `minimum`, stops start-up with the variable's name."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise SettingsError(f"{name} must be a number >= {minimum}, got {raw!r}")
    return value


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    """`env_number` for whole numbers."""
    value = env_number(env, name, default, minimum=minimum)
    if value != int(value):
        raise SettingsError(f"{name} must be an integer, got {env.get(name)!r}")
    return int(value)


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """The parser of a boolean knob a domain reads from `Settings.extra`: unset or blank is
    `default`; anything but true/false (1/0, yes/no, on/off) stops start-up."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    return _bool(raw, name)


def _list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _app_permissions(value: str) -> tuple[str, ...]:
    names = _list(value)
    for name in names:
        if not re.fullmatch(r"[a-z0-9_.:-]{1,100}", name):
            raise SettingsError(
                f"TENANTD_PERMISSIONS: {name!r} is not a permission (a-z 0-9 _ . : -, no *)"
            )
    return names


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


@dataclass(frozen=True)
class OAuthProviderSettings:
    name: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    # OAUTH_<NAME>_TOKEN_AUTH: how to authenticate at the token endpoint; None: the first of
    # client_secret_basic, client_secret_post in the provider's discovery document.
    token_auth: str | None = None
    # A social preset (github, google, microsoft, gitlab, apple; auth/oauth/presets.py knows
    # their endpoints) or None for a generic OpenID Connect provider. `issuer` is the
    # preset's unless OAUTH_<NAME>_ISSUER overrides it; `options` holds the preset's extra
    # variables (OAUTH_<NAME>_<KEY> for the keys in OAUTH_PRESET_OPTIONS).
    preset: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str) -> str | None:
        return dict(self.options).get(key)

    @property
    def proves_fresh_sign_in(self) -> bool:
        """Whether the provider can confirm a recent sign-in (prompt=login, auth_time) for a
        step-up: every OpenID provider; not GitHub (plain OAuth 2.0)."""
        return self.preset != "github"


TOKEN_AUTH_METHODS = ("client_secret_basic", "client_secret_post")
# Social presets: OAUTH_PROVIDERS=github,google,... with OAUTH_<NAME>_CLIENT_ID and _SECRET;
# each may take these optional (Apple: required) extra variables.
OAUTH_PRESET_OPTIONS: dict[str, tuple[str, ...]] = {
    "github": ("URL", "API_URL"),
    "google": (),
    "microsoft": ("TENANT",),
    "gitlab": (),
    "apple": ("TEAM_ID", "KEY_ID"),
}
OAUTH_PRESET_REQUIRED: dict[str, tuple[str, ...]] = {"apple": ("TEAM_ID", "KEY_ID")}
ACCESS_TOKEN_ALGS = ("EdDSA", "ES256", "HS256")


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str | None
    secret_key: str
    public_base_url: str = "http://127.0.0.1:8080"
    cookie_secure: bool = True
    session_cookie_domain: str | None = None
    allowed_origins: tuple[str, ...] = ()
    account_domain_claiming: bool = False
    notifications_sse_enabled: bool = False
    notifications_sse_max_streams_per_user: int = 10
    notifications_sse_max_streams: int = 10000
    queues_enabled: bool = False
    vapid_public_key: str | None = None
    vapid_private_key: str | None = None
    vapid_subject: str | None = None
    web_push_allowed_hosts: tuple[str, ...] = DEFAULT_PUSH_HOSTS
    web_push_max_subscriptions_per_user: int = 20
    web_push_timeout_seconds: float = 10.0  # one delivery to a push service, whole request
    email_provider: str = "file"
    email_from: str = "tenantd <no-reply@localhost>"
    email_file_dir: Path = Path("var/mail")
    postmark_server_token: str | None = None
    postmark_api_url: str = "https://api.postmarkapp.com"
    resend_api_key: str | None = None
    resend_api_url: str = "https://api.resend.com"
    sendgrid_api_key: str | None = None
    sendgrid_api_url: str = "https://api.sendgrid.com"
    resend_webhook_secret: str | None = None
    sendgrid_webhook_public_key: str | None = None
    event_modules: tuple[str, ...] = ()
    event_catalog: str | None = None  # a JSON or YAML file of declarative event types
    # The application's own permissions (TENANTD_PERMISSIONS); empty: custom roles may name
    # any (docs/roles.md).
    app_permissions: tuple[str, ...] = ()
    invitation_ttl_hours: int = 168
    refresh_token_ttl_days: int = 30
    # A rotated-out refresh token repeats its rotation within this many seconds while its
    # successor is unused (parallel refreshes of several tabs); other reuse ends the family.
    refresh_reuse_interval_seconds: int = 10
    default_plan: str = "free"
    log_level: str = "info"
    log_format: str = "console"
    job_lease_seconds: int = 30
    db_pool_min: int = 2
    db_pool_max: int = 10
    # Streaming replicas for the reads that tolerate lag (docs/scaling.md); empty: primary only.
    database_replica_urls: tuple[str, ...] = ()
    # How long a read waits for a replica to replay the caller's own writes before the primary.
    database_replica_wait_ms: int = 200
    oauth_providers: tuple[OAuthProviderSettings, ...] = ()
    # Signed access tokens (issue 14): the algorithm (EdDSA, ES256, or HS256 with SECRET_KEY),
    # an optional `aud`, the automatic key rotation interval (0: off) and the addresses that
    # may call POST /api/v1/auth/introspect without an API key.
    access_token_alg: str = "EdDSA"
    access_token_audience: str | None = None
    access_token_key_rotation_days: float = 30.0
    introspect_allowed_ips: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    # Multi-factor authentication (issue 17): step-up age, WebAuthn relying party.
    reauth_max_age_seconds: int = 600
    webauthn_rp_id: str = "127.0.0.1"
    webauthn_rp_name: str = "tenantd"
    webauthn_origins: tuple[str, ...] = ()
    # Outbox, events API and outbound webhooks (issue 15).
    events_retention_days: int = 30
    outbox_poll_seconds: float = 0.1
    webhook_retry_base_seconds: float = 30.0
    webhook_timeout_seconds: float = 10.0
    # Sessions (issue 14): mail the user when they sign in from a browser never seen for them.
    new_signin_email: bool = True
    # --- Beyond (issue 18): SMTP provider, Postmark and Amazon SES (SNS) webhooks ---
    smtp_url: str | None = None
    smtp_starttls: bool = True
    smtp_ca_file: str | None = None
    postmark_webhook_username: str | None = None
    postmark_webhook_password: str | None = None
    ses_sns_topic_arns: tuple[str, ...] = ()
    # Sign-in breadth (issue 29): email code and magic link, breached passwords, bot checks.
    magic_link_enabled: bool = False
    password_breach_check: str = "off"  # off | warn | block
    pwned_passwords_url: str = "https://api.pwnedpasswords.com"
    captcha_provider: str | None = None  # turnstile | hcaptcha | recaptcha
    captcha_secret: str | None = None
    captcha_verify_url: str | None = None  # None: the provider's own siteverify URL
    captcha_site_key: str | None = None  # the hosted pages' widget
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def web_push_enabled(self) -> bool:
        return bool(self.vapid_public_key and self.vapid_private_key and self.vapid_subject)

    def __repr__(self) -> str:  # never print secrets
        return f"Settings(data_dir={self.data_dir!s}, email_provider={self.email_provider})"


def _secret_key(data_dir: Path, env: dict[str, str]) -> str:
    if env.get("SECRET_KEY"):
        key = env["SECRET_KEY"]
        if len(key) < 32:
            raise SettingsError("SECRET_KEY must be at least 32 characters")
        return key
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


def _oauth_providers(env: dict[str, str]) -> tuple[OAuthProviderSettings, ...]:
    providers = []
    for name in _list(env.get("OAUTH_PROVIDERS", "")):
        prefix = "OAUTH_" + name.upper().replace("-", "_") + "_"
        preset = name if name in OAUTH_PRESET_OPTIONS else None
        needed: tuple[str, ...] = ("CLIENT_ID", "CLIENT_SECRET")
        if preset is None:
            needed = ("ISSUER", *needed)
        needed += OAUTH_PRESET_REQUIRED.get(name, ())
        missing = [k for k in needed if not env.get(prefix + k)]
        if missing:
            raise SettingsError(
                f"OAuth provider {name}: set {', '.join(prefix + k for k in missing)}"
            )
        # A preset without OAUTH_<NAME>_SCOPES asks for its own default scopes.
        default_scopes = () if preset else ("openid", "email", "profile")
        scopes = _list(env.get(prefix + "SCOPES", "").replace(" ", ",")) or default_scopes
        if preset == "apple":
            _check_apple_key(env[prefix + "CLIENT_SECRET"])
        token_auth = env.get(prefix + "TOKEN_AUTH", "").strip().lower() or None
        if token_auth is not None and token_auth not in TOKEN_AUTH_METHODS:
            raise SettingsError(
                f"{prefix}TOKEN_AUTH must be {' or '.join(TOKEN_AUTH_METHODS)}, got {token_auth!r}"
            )
        providers.append(
            OAuthProviderSettings(
                name=name,
                issuer=env.get(prefix + "ISSUER", "").rstrip("/"),
                client_id=env[prefix + "CLIENT_ID"],
                client_secret=env[prefix + "CLIENT_SECRET"],
                scopes=scopes,
                token_auth=token_auth,
                preset=preset,
                options=tuple(
                    (key, env[prefix + key].strip())
                    for key in OAUTH_PRESET_OPTIONS.get(name, ())
                    if env.get(prefix + key, "").strip()
                ),
            )
        )
    return tuple(providers)


def _check_apple_key(pem: str) -> None:
    """Apple's client secret is a JWT we sign: OAUTH_APPLE_CLIENT_SECRET holds the .p8 key."""
    try:
        key = serialization.load_pem_private_key(pem.replace("\\n", "\n").encode(), None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise SettingsError(
            "OAUTH_APPLE_CLIENT_SECRET must be the .p8 private key (PEM, P-256) of your Sign in"
            " with Apple key; newlines may be written as \\n"
        )


def _access_token_alg(env: Mapping[str, str]) -> str:
    raw = env.get("ACCESS_TOKEN_ALG", "").strip() or "EdDSA"
    for alg in ACCESS_TOKEN_ALGS:
        if raw.lower() == alg.lower():
            return alg
    raise SettingsError(f"ACCESS_TOKEN_ALG must be EdDSA, ES256 or HS256, got {raw!r}")


def _networks(
    env: Mapping[str, str], name: str
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for item in _list(env.get(name, "")):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise SettingsError(f"{name}: not an address or CIDR: {item}") from None
    return tuple(networks)


BREACH_CHECK_MODES = ("off", "warn", "block")
CAPTCHA_PROVIDERS = ("turnstile", "hcaptcha", "recaptcha")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    """One of `choices` (lower-cased), or None when unset or blank."""
    value = env.get(name, "").strip().lower() or None
    if value is not None and value not in choices:
        raise SettingsError(f"{name} must be {' | '.join(choices)}, got {value!r}")
    return value


def _origins(value: str) -> tuple[str, ...]:
    """ALLOWED_ORIGINS as browsers write an Origin header: lowercase scheme and host, the
    port only when not the scheme's default, no path (`https://App.example.com:443/` reads
    `https://app.example.com`), so the CSRF check and CORS compare strings."""
    default_ports = {"http": 80, "https": 443}
    origins: list[str] = []
    for item in _list(value):
        parts = urlsplit(item.lower())
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in default_ports or not parts.hostname or port == -1:
            raise SettingsError(f"ALLOWED_ORIGINS: not an http(s) origin: {item}")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        suffix = f":{port}" if port is not None and port != default_ports[parts.scheme] else ""
        origins.append(f"{parts.scheme}://{host}{suffix}")
    return tuple(dict.fromkeys(origins))


def _cookie_domain(value: str, host: str) -> str | None:
    """SESSION_COOKIE_DOMAIN: a parent domain of PUBLIC_BASE_URL's host (a browser drops a
    cookie whose Domain does not cover the host that sets it), or None (host-only)."""
    domain = value.strip().lower().lstrip(".")
    if not domain:
        return None
    host = host.lower()
    if "." not in domain or not (host == domain or host.endswith("." + domain)):
        raise SettingsError(
            f"SESSION_COOKIE_DOMAIN must be PUBLIC_BASE_URL's host or a parent domain of it"
            f" (e.g. example.com for auth.example.com), got {value!r}"
        )
    return domain


def load_settings(
    env_file: str | Path | None = None, environ: dict[str, str] | None = None
) -> Settings:
    """Build Settings from the process environment; an env file fills in what is unset."""
    env: dict[str, str] = {}
    if env_file is not None:
        env.update(read_env_file(env_file))
    env.update(os.environ if environ is None else environ)

    data_dir = Path(env.get("TENANTD_DATA_DIR", "var")).absolute()
    public_base_url = env.get("PUBLIC_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
    origin_parts = urlsplit(public_base_url)
    default_origin = f"{origin_parts.scheme}://{origin_parts.netloc}"
    provider = env.get("EMAIL_PROVIDER", "file").strip().lower()
    if provider not in {"file", "postmark", "resend", "sendgrid", "smtp"}:
        raise SettingsError(
            f"EMAIL_PROVIDER must be file, postmark, resend, sendgrid or smtp: {provider}"
        )
    log_format = env.get("LOG_FORMAT", "console").lower()
    if log_format not in {"console", "json"}:
        raise SettingsError("LOG_FORMAT must be console or json")

    def opt(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    if opt("CAPTCHA_PROVIDER") and not opt("CAPTCHA_SECRET"):
        raise SettingsError("CAPTCHA_PROVIDER is set: set CAPTCHA_SECRET too")
    return Settings(
        data_dir=data_dir,
        database_url=opt("DATABASE_URL"),
        secret_key=_secret_key(data_dir, env),
        public_base_url=public_base_url,
        cookie_secure=_bool(env.get("COOKIE_SECURE", "true"), "COOKIE_SECURE"),
        session_cookie_domain=_cookie_domain(
            env.get("SESSION_COOKIE_DOMAIN", ""), origin_parts.hostname or ""
        ),
        allowed_origins=_origins(env.get("ALLOWED_ORIGINS", "") or default_origin),
        account_domain_claiming=_bool(
            env.get("ACCOUNT_DOMAIN_CLAIMING", "false"), "ACCOUNT_DOMAIN_CLAIMING"
        ),
        notifications_sse_enabled=_bool(
            env.get("NOTIFICATIONS_SSE_ENABLED", "false"), "NOTIFICATIONS_SSE_ENABLED"
        ),
        notifications_sse_max_streams_per_user=env_int(
            env, "NOTIFICATIONS_SSE_MAX_STREAMS_PER_USER", 10, minimum=1
        ),
        notifications_sse_max_streams=env_int(
            env, "NOTIFICATIONS_SSE_MAX_STREAMS", 10000, minimum=1
        ),
        queues_enabled=_bool(env.get("QUEUES_ENABLED", "false"), "QUEUES_ENABLED"),
        vapid_public_key=opt("WEB_PUSH_VAPID_PUBLIC_KEY"),
        vapid_private_key=opt("WEB_PUSH_VAPID_PRIVATE_KEY"),
        vapid_subject=opt("WEB_PUSH_VAPID_SUBJECT"),
        web_push_allowed_hosts=_list(env.get("WEB_PUSH_ALLOWED_HOSTS", "")) or DEFAULT_PUSH_HOSTS,
        web_push_max_subscriptions_per_user=env_int(
            env, "WEB_PUSH_MAX_SUBSCRIPTIONS_PER_USER", 20, minimum=1
        ),
        web_push_timeout_seconds=env_number(
            env, "TENANTD_WEB_PUSH_TIMEOUT_SECONDS", 10.0, minimum=0.01
        ),
        email_provider=provider,
        email_from=env.get("EMAIL_FROM", "tenantd <no-reply@localhost>"),
        email_file_dir=Path(env.get("EMAIL_FILE_DIR", str(data_dir / "mail"))).absolute(),
        postmark_server_token=opt("POSTMARK_SERVER_TOKEN"),
        postmark_api_url=env.get("POSTMARK_API_URL", "https://api.postmarkapp.com").rstrip("/"),
        resend_api_key=opt("RESEND_API_KEY"),
        resend_api_url=env.get("RESEND_API_URL", "https://api.resend.com").rstrip("/"),
        sendgrid_api_key=opt("SENDGRID_API_KEY"),
        sendgrid_api_url=env.get("SENDGRID_API_URL", "https://api.sendgrid.com").rstrip("/"),
        resend_webhook_secret=opt("RESEND_WEBHOOK_SECRET"),
        sendgrid_webhook_public_key=opt("SENDGRID_WEBHOOK_PUBLIC_KEY"),
        event_modules=_list(env.get("TENANTD_EVENT_MODULES", "")),
        event_catalog=opt("TENANTD_EVENT_CATALOG"),
        app_permissions=_app_permissions(env.get("TENANTD_PERMISSIONS", "")),
        invitation_ttl_hours=env_int(env, "INVITATION_TTL_HOURS", 168, minimum=1),
        refresh_token_ttl_days=env_int(env, "REFRESH_TOKEN_TTL_DAYS", 30, minimum=1),
        refresh_reuse_interval_seconds=env_int(env, "REFRESH_REUSE_INTERVAL_SECONDS", 10),
        default_plan=env.get("DEFAULT_PLAN", "free"),
        log_level=env.get("LOG_LEVEL", "info").lower(),
        log_format=log_format,
        job_lease_seconds=env_int(env, "JOB_LEASE_SECONDS", 30, minimum=1),
        db_pool_min=env_int(env, "DB_POOL_MIN", 2, minimum=1),
        db_pool_max=env_int(env, "DB_POOL_MAX", 10, minimum=1),
        database_replica_urls=_list(env.get("DATABASE_REPLICA_URLS", "")),
        database_replica_wait_ms=env_int(env, "DATABASE_REPLICA_WAIT_MS", 200),
        oauth_providers=_oauth_providers(env),
        access_token_alg=_access_token_alg(env),
        access_token_audience=opt("ACCESS_TOKEN_AUDIENCE"),
        access_token_key_rotation_days=env_number(env, "ACCESS_TOKEN_KEY_ROTATION_DAYS", 30.0),
        introspect_allowed_ips=_networks(env, "TENANTD_INTROSPECT_ALLOWED_IPS"),
        # Multi-factor authentication: WebAuthn's relying party defaults to PUBLIC_BASE_URL.
        reauth_max_age_seconds=env_int(env, "REAUTH_MAX_AGE_SECONDS", 600, minimum=1),
        webauthn_rp_id=env.get("WEBAUTHN_RP_ID", "").strip() or _rp_id(origin_parts.hostname),
        webauthn_rp_name=env.get("WEBAUTHN_RP_NAME", "").strip() or "tenantd",
        webauthn_origins=_list(env.get("WEBAUTHN_ORIGINS", "")) or (_rp_origin(origin_parts),),
        # Outbox, events API and outbound webhooks (issue 15).
        events_retention_days=env_int(env, "TENANTD_EVENTS_RETENTION_DAYS", 30, minimum=1),
        outbox_poll_seconds=env_number(env, "TENANTD_OUTBOX_POLL_SECONDS", 0.1, minimum=0.005),
        webhook_retry_base_seconds=env_number(
            env, "TENANTD_WEBHOOK_RETRY_BASE_SECONDS", 30.0, minimum=0.0
        ),
        webhook_timeout_seconds=env_number(
            env, "TENANTD_WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.1
        ),
        # Sessions (issue 14): the "new sign-in" mail.
        new_signin_email=_bool(env.get("NEW_SIGNIN_EMAIL", "true"), "NEW_SIGNIN_EMAIL"),
        # Beyond (issue 18): SMTP provider, Postmark and Amazon SES (SNS) webhooks
        smtp_url=opt("SMTP_URL"),
        smtp_starttls=_bool(env.get("SMTP_STARTTLS", "true"), "SMTP_STARTTLS"),
        smtp_ca_file=opt("SMTP_CA_FILE"),
        postmark_webhook_username=opt("POSTMARK_WEBHOOK_USERNAME"),
        postmark_webhook_password=opt("POSTMARK_WEBHOOK_PASSWORD"),
        ses_sns_topic_arns=_list(env.get("SES_SNS_TOPIC_ARNS", "")),
        # Sign-in breadth (issue 29).
        magic_link_enabled=_bool(env.get("MAGIC_LINK_ENABLED", "false"), "MAGIC_LINK_ENABLED"),
        password_breach_check=_choice(env, "PASSWORD_BREACH_CHECK", BREACH_CHECK_MODES) or "off",
        pwned_passwords_url=(opt("PWNED_PASSWORDS_URL") or "https://api.pwnedpasswords.com").rstrip(
            "/"
        ),
        captcha_provider=_choice(env, "CAPTCHA_PROVIDER", CAPTCHA_PROVIDERS),
        captcha_secret=opt("CAPTCHA_SECRET"),
        captcha_verify_url=opt("CAPTCHA_VERIFY_URL"),
        captcha_site_key=opt("CAPTCHA_SITE_KEY"),
        extra={k: v for k, v in env.items() if k.startswith(("TENANTD_", "RATE_LIMIT_"))},
    )


SETTINGS = web.AppKey("settings", Settings)


# -- WebAuthn's relying party from PUBLIC_BASE_URL (issue 25 item 19) ---------------------------


def is_ip_address(host: str | None) -> bool:
    try:
        ipaddress.ip_address((host or "").strip("[]"))
    except ValueError:
        return False
    return True


def _rp_id(hostname: str | None) -> str:
    """Browsers refuse an IP address as a relying party id: a loopback address (the default
    development setup) becomes `localhost`; another IP stays (passkeys are then off)."""
    host = hostname or ""
    if is_ip_address(host) and ipaddress.ip_address(host.strip("[]")).is_loopback:
        return "localhost"
    return host


def _rp_origin(parts: SplitResult) -> str:
    """The origin passkeys are used from: PUBLIC_BASE_URL's, at `localhost` when its host is
    a loopback address (the relying party id must match the page's host)."""
    if _rp_id(parts.hostname) == "localhost" and is_ip_address(parts.hostname):
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://localhost{port}"
    return f"{parts.scheme}://{parts.netloc}"
