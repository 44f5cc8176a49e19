"""Identity's settings sections: tokens, sessions and passkeys (`IdentitySettings`), and the
ways to sign in (`SignInSettings`: OpenID Connect and social providers, email codes,
breached passwords, bot checks)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar
from urllib.parse import SplitResult, urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BeforeValidator

from tenantd.settings import (
    DERIVED,
    SWITCH,
    Count,
    Flag,
    Names,
    Networks,
    Positive,
    Section,
    SettingsError,
    Text,
    UrlBase,
    at_least,
    env,
    is_ip_address,
    names,
    one_of,
    public_base_url,
)

ACCESS_TOKEN_ALGS = ("EdDSA", "ES256", "HS256")
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
BREACH_CHECK_MODES = ("off", "warn", "block")
CAPTCHA_PROVIDERS = ("turnstile", "hcaptcha", "recaptcha")


def _access_token_alg(value: Any) -> str:
    raw = str(value).strip()
    for alg in ACCESS_TOKEN_ALGS:
        if raw.lower() == alg.lower():
            return alg
    raise ValueError(f"must be EdDSA, ES256 or HS256, got {raw!r}")


def rp_id(hostname: str | None) -> str:
    """Browsers refuse an IP address as a relying party id: a loopback address (the default
    development setup) becomes `localhost`; another IP stays (passkeys are then off)."""
    host = hostname or ""
    if is_ip_address(host) and ipaddress.ip_address(host.strip("[]")).is_loopback:
        return "localhost"
    return host


def rp_origin(parts: SplitResult) -> str:
    """The origin passkeys are used from: PUBLIC_BASE_URL's, at `localhost` when its host is
    a loopback address (the relying party id must match the page's host)."""
    if rp_id(parts.hostname) == "localhost" and is_ip_address(parts.hostname):
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://localhost{port}"
    return f"{parts.scheme}://{parts.netloc}"


class IdentitySettings(Section):
    """Access and refresh tokens, step-up, passkeys and the new sign-in mail."""

    title: ClassVar[str] = "Tokens, sessions and passkeys"

    access_token_alg: Annotated[str, BeforeValidator(_access_token_alg)] = env(
        "ACCESS_TOKEN_ALG",
        "EdDSA (Ed25519, default) or ES256 (P-256): signed with a key kept in PostgreSQL"
        " (encrypted under SECRET_KEY), public keys at GET /.well-known/jwks.json. HS256: the"
        " compatibility mode, signed with SECRET_KEY itself (no kid, nothing published; only"
        " holders of SECRET_KEY verify).",
        default="EdDSA",
        json_schema_extra=SWITCH,
    )
    access_token_audience: Text | None = env(
        "ACCESS_TOKEN_AUDIENCE",
        "Optional `aud` claim of every access token (tenantd checks it too). Unset: no aud.",
        default=None,
        examples=["https://api.example.com"],
    )
    access_token_key_rotation_days: Annotated[float, BeforeValidator(at_least(0))] = env(
        "ACCESS_TOKEN_KEY_ROTATION_DAYS",
        "The `keys` sweep rotates the signing key this often (days; 0: only `tenantd keys"
        " rotate`). A next key is published 6 minutes before it signs; the old one stays"
        " published 16 minutes.",
        default=30.0,
    )
    introspect_allowed_ips: Networks = env(
        "TENANTD_INTROSPECT_ALLOWED_IPS",
        "Addresses (or CIDRs, comma list) that may call POST /api/v1/auth/introspect without"
        " an API key; X-Forwarded-For counts only from TENANTD_TRUSTED_PROXIES. Unset: API"
        " keys only.",
        default=(),
    )
    refresh_token_ttl_days: Positive = env(
        "REFRESH_TOKEN_TTL_DAYS",
        "Days a refresh token (the refresh_token cookie) lives.",
        default=30,
    )
    refresh_reuse_interval_seconds: Count = env(
        "REFRESH_REUSE_INTERVAL_SECONDS",
        "A rotated-out refresh token whose successor is still unused repeats its rotation"
        " within this many seconds (several tabs refreshing at once); other reuse ends the"
        " session family and the user is emailed. 0 = strict one-time use.",
        default=10,
    )
    new_signin_email: Flag = env(
        "NEW_SIGNIN_EMAIL",
        "A sign-in from a browser never seen for the user (no device_id cookie of theirs)"
        ' mails them "New sign-in" (device, IP, time, a link to {PUBLIC_BASE_URL}/account).'
        " The user's first recorded browser is never mailed. false: off.",
        default=True,
        json_schema_extra=SWITCH,
    )
    reauth_max_age_seconds: Positive = env(
        "REAUTH_MAX_AGE_SECONDS",
        "Dangerous actions (password change, factor removal, recovery codes, ownership"
        " transfer, account deletion, requireMfa) need a sign-in or POST /api/v1/auth/reauth"
        " this recent.",
        default=600,
    )
    webauthn_rp_id: Text = env(
        "WEBAUTHN_RP_ID",
        "WebAuthn relying party id: a domain (never an IP address). Default: the host of"
        " PUBLIC_BASE_URL.",
        default="127.0.0.1",
        examples=["app.example.com"],
        json_schema_extra=DERIVED,
    )
    webauthn_origins: Names = env(
        "WEBAUTHN_ORIGINS",
        "Origins allowed in passkey ceremonies (comma list). Default: the origin of"
        " PUBLIC_BASE_URL.",
        default=(),
        examples=["https://app.example.com"],
        json_schema_extra=DERIVED,
    )
    webauthn_rp_name: Text = env(
        "WEBAUTHN_RP_NAME",
        "Shown by authenticators and as the issuer in authenticator apps.",
        default="tenantd",
    )

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> dict[str, Any]:
        values = super().from_environment(environment)
        base = urlsplit(public_base_url(environment))
        values.setdefault("WEBAUTHN_RP_ID", rp_id(base.hostname))
        values.setdefault("WEBAUTHN_ORIGINS", rp_origin(base))
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


def oauth_providers(environment: Mapping[str, str]) -> tuple[OAuthProviderSettings, ...]:
    """OAUTH_PROVIDERS and each provider's OAUTH_<NAME>_* variables."""
    providers = []
    for name in names(environment.get("OAUTH_PROVIDERS", "")):
        prefix = "OAUTH_" + name.upper().replace("-", "_") + "_"
        preset = name if name in OAUTH_PRESET_OPTIONS else None
        needed: tuple[str, ...] = ("CLIENT_ID", "CLIENT_SECRET")
        if preset is None:
            needed = ("ISSUER", *needed)
        needed += OAUTH_PRESET_REQUIRED.get(name, ())
        missing = [k for k in needed if not environment.get(prefix + k)]
        if missing:
            raise SettingsError(
                f"OAuth provider {name}: set {', '.join(prefix + k for k in missing)}"
            )
        # A preset without OAUTH_<NAME>_SCOPES asks for its own default scopes.
        default_scopes = () if preset else ("openid", "email", "profile")
        scopes = names(environment.get(prefix + "SCOPES", "").replace(" ", ",")) or default_scopes
        if preset == "apple":
            _check_apple_key(environment[prefix + "CLIENT_SECRET"])
        token_auth = environment.get(prefix + "TOKEN_AUTH", "").strip().lower() or None
        if token_auth is not None and token_auth not in TOKEN_AUTH_METHODS:
            raise SettingsError(
                f"{prefix}TOKEN_AUTH must be {' or '.join(TOKEN_AUTH_METHODS)}, got {token_auth!r}"
            )
        providers.append(
            OAuthProviderSettings(
                name=name,
                issuer=environment.get(prefix + "ISSUER", "").rstrip("/"),
                client_id=environment[prefix + "CLIENT_ID"],
                client_secret=environment[prefix + "CLIENT_SECRET"],
                scopes=scopes,
                token_auth=token_auth,
                preset=preset,
                options=tuple(
                    (key, environment[prefix + key].strip())
                    for key in OAUTH_PRESET_OPTIONS.get(name, ())
                    if environment.get(prefix + key, "").strip()
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


class SignInSettings(Section):
    """The ways to sign in besides a password, and the checks on sign-up and sign-in."""

    title: ClassVar[str] = "Sign-in"

    oauth_providers: tuple[OAuthProviderSettings, ...] = env(
        "OAUTH_PROVIDERS",
        "OpenID Connect and social sign-in: comma list of provider names (the presets github,"
        " google, microsoft, gitlab, apple, or any other name for a generic OpenID Connect"
        " provider), then per NAME (upper-case, - -> _): OAUTH_<NAME>_ISSUER (generic"
        " providers), OAUTH_<NAME>_CLIENT_ID, OAUTH_<NAME>_CLIENT_SECRET,"
        " OAUTH_<NAME>_SCOPES (space or comma list), OAUTH_<NAME>_TOKEN_AUTH (token endpoint"
        " client authentication: client_secret_basic or client_secret_post; unset: the first"
        " of the two in the provider's token_endpoint_auth_methods_supported), and the"
        " presets' own OAUTH_GITHUB_URL, OAUTH_GITHUB_API_URL, OAUTH_MICROSOFT_TENANT,"
        " OAUTH_APPLE_TEAM_ID, OAUTH_APPLE_KEY_ID (Apple's client secret is the .p8 key).",
        default=(),
        examples=["google"],
    )
    magic_link_enabled: Flag = env(
        "MAGIC_LINK_ENABLED",
        "true: POST /api/v1/auth/email-code mails a 6-digit code and a magic link; /verify"
        " signs in. An address with no user signs up (verified) when its code is used. Off:"
        " the routes answer 404.",
        default=False,
        json_schema_extra=SWITCH,
    )
    password_breach_check: Annotated[str, BeforeValidator(one_of(*BREACH_CHECK_MODES))] = env(
        "PASSWORD_BREACH_CHECK",
        "Breached passwords at sign-up, reset and change: off | warn | block (Pwned Passwords"
        " range API; only 5 hex characters of the SHA-1 leave the process; an unreachable API"
        " never blocks).",
        default="off",
        json_schema_extra=SWITCH,
    )
    pwned_passwords_url: UrlBase = env(
        "PWNED_PASSWORDS_URL",
        "The Pwned Passwords API base (requests go to {PWNED_PASSWORDS_URL}/range/{5 hex}).",
        default="https://api.pwnedpasswords.com",
    )
    captcha_provider: Annotated[str, BeforeValidator(one_of(*CAPTCHA_PROVIDERS))] | None = env(
        "CAPTCHA_PROVIDER",
        "Bot checks on sign-up, email-code and reset requests, and login after failures:"
        " turnstile | hcaptcha | recaptcha. Unset: off. The secret is required with a"
        " provider; the verify URL defaults to the provider's; the site key puts the widget on"
        " the hosted pages.",
        default=None,
        examples=["turnstile"],
        json_schema_extra=SWITCH,
    )
    captcha_secret: Text | None = env("CAPTCHA_SECRET", default=None, repr=False)
    captcha_verify_url: Text | None = env("CAPTCHA_VERIFY_URL", default=None)
    captcha_site_key: Text | None = env("CAPTCHA_SITE_KEY", default=None)

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> dict[str, Any]:
        values = super().from_environment(environment)
        values["OAUTH_PROVIDERS"] = oauth_providers(environment)
        if values.get("CAPTCHA_PROVIDER") and not values.get("CAPTCHA_SECRET"):
            raise SettingsError("CAPTCHA_PROVIDER is set: set CAPTCHA_SECRET too")
        return values

    def switches(self) -> dict[str, Any]:
        return {
            **super().switches(),
            "OAUTH_PROVIDERS": ",".join(provider.name for provider in self.oauth_providers),
        }
