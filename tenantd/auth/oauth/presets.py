"""Social presets: `OAUTH_PROVIDERS=github,google,microsoft,gitlab,apple` with
`OAUTH_<NAME>_CLIENT_ID` and `OAUTH_<NAME>_CLIENT_SECRET`; this module knows each one's
endpoints and quirks, the code flow of service.py does the rest.

- google, gitlab: OpenID Connect by discovery (`OAUTH_<NAME>_ISSUER` overrides the issuer: a
  self-managed GitLab). Google's ID tokens name their issuer with or without `https://`.
- microsoft: OpenID Connect on the Microsoft identity platform v2.0; `OAUTH_MICROSOFT_TENANT`
  (default `common`; `organizations`, `consumers` or a tenant id). For `common` and
  `organizations` the discovery document's issuer is the template
  `https://login.microsoftonline.com/{tenantid}/v2.0`; an ID token's `iss` must be that
  template with its own `tid`. Microsoft does not vouch for `email` in general: an address
  counts as verified only for a personal account (the consumers tenant) or with the
  `xms_edov` claim (email domain owner verified) true.
- apple: OpenID Connect with `response_mode=form_post` (the callback is a cross-site POST, so
  the state cookie is SameSite=None; Secure), names only in the first callback's `user`
  field, and a client secret that is an ES256 JWT signed with the key from Apple's developer
  account: `OAUTH_APPLE_CLIENT_SECRET` holds that .p8 private key (PEM), with
  `OAUTH_APPLE_TEAM_ID` and `OAUTH_APPLE_KEY_ID`.
- github: OAuth 2.0, not OpenID Connect: no ID token; the user from `GET /user`, the address
  from `GET /user/emails` (the primary one, which must be verified). `OAUTH_GITHUB_URL` and
  `OAUTH_GITHUB_API_URL` point at a GitHub Enterprise Server (`https://HOST`,
  `https://HOST/api/v3`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any

import jwt
import orjson

from tenantd.auth.oauth.discovery import ProviderMetadata, require_safe_url
from tenantd.auth.oauth.errors import ProviderError
from tenantd.auth.oauth.flow import VerifiedIdentity, read_email
from tenantd.identity.settings import OAuthProviderSettings

GOOGLE_ISSUER = "https://accounts.google.com"
GITLAB_ISSUER = "https://gitlab.com"
APPLE_ISSUER = "https://appleid.apple.com"
MICROSOFT_AUTHORITY = "https://login.microsoftonline.com"
MICROSOFT_CONSUMERS_TENANT = "9188040d-6c67-4c5b-b112-36a304b66dad"
MICROSOFT_TENANT_PLACEHOLDER = "{tenantid}"
GITHUB_URL = "https://github.com"
GITHUB_API_URL = "https://api.github.com"
APPLE_SECRET_TTL_SECONDS = 3600  # Apple allows up to six months; we sign one per exchange

_TENANT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MULTI_TENANT = frozenset({"common", "organizations"})


@dataclass(frozen=True)
class Preset:
    openid: bool  # False: plain OAuth 2.0 (GitHub)
    scopes: tuple[str, ...]
    response_mode: str | None = None  # form_post: the callback arrives as a POST form


PRESETS: dict[str, Preset] = {
    "google": Preset(openid=True, scopes=("openid", "email", "profile")),
    "microsoft": Preset(openid=True, scopes=("openid", "email", "profile")),
    "gitlab": Preset(openid=True, scopes=("openid", "email", "profile")),
    "apple": Preset(openid=True, scopes=("openid", "email", "name"), response_mode="form_post"),
    "github": Preset(openid=False, scopes=("read:user", "user:email")),
}


# How the hosted pages name a provider ("Continue with GitHub"); others are capitalised.
LABELS = {
    "github": "GitHub",
    "google": "Google",
    "microsoft": "Microsoft",
    "gitlab": "GitLab",
    "apple": "Apple",
}


def label(name: str) -> str:
    return LABELS.get(name, name.capitalize())


def preset_of(provider: OAuthProviderSettings) -> Preset | None:
    return PRESETS.get(provider.preset) if provider.preset else None


def is_openid(provider: OAuthProviderSettings) -> bool:
    preset = preset_of(provider)
    return preset is None or preset.openid


def scopes(provider: OAuthProviderSettings) -> tuple[str, ...]:
    preset = preset_of(provider)
    if provider.scopes or preset is None:
        return provider.scopes
    return preset.scopes


def response_mode(provider: OAuthProviderSettings) -> str | None:
    preset = preset_of(provider)
    return preset.response_mode if preset is not None else None


def state_same_site(provider: OAuthProviderSettings) -> str:
    """The state cookie must come back with a cross-site form POST (form_post)."""
    return "None" if response_mode(provider) == "form_post" else "Lax"


def _microsoft_tenant(provider: OAuthProviderSettings) -> str:
    return (provider.option("TENANT") or "common").lower()


def discovery_issuer(provider: OAuthProviderSettings) -> str:
    """Where `/.well-known/openid-configuration` is read (OAUTH_<NAME>_ISSUER wins)."""
    if provider.issuer:
        return provider.issuer
    if provider.preset == "google":
        return GOOGLE_ISSUER
    if provider.preset == "gitlab":
        return GITLAB_ISSUER
    if provider.preset == "apple":
        return APPLE_ISSUER
    if provider.preset == "microsoft":
        return f"{MICROSOFT_AUTHORITY}/{_microsoft_tenant(provider)}/v2.0"
    raise ProviderError(f"provider {provider.name} has no issuer")


def accepts_issuer(provider: OAuthProviderSettings, published: str, configured: str) -> bool:
    """Whether a discovery document's `issuer` belongs to the configured provider."""
    if published.rstrip("/") == configured.rstrip("/"):
        return True
    if provider.preset != "microsoft":
        return False
    # .../common/v2.0 and .../organizations/v2.0 publish the template; .../consumers/v2.0
    # publishes the consumers tenant.
    base, _, tenant = configured.rstrip("/").removesuffix("/v2.0").rpartition("/")
    if tenant in _MULTI_TENANT:
        return published == f"{base}/{MICROSOFT_TENANT_PLACEHOLDER}/v2.0"
    if tenant == "consumers":
        return published == f"{base}/{MICROSOFT_CONSUMERS_TENANT}/v2.0"
    return False


def id_token_issuers(
    provider: OAuthProviderSettings, metadata: ProviderMetadata, id_token: str
) -> list[str]:
    """The `iss` values an ID token of this provider may carry (checked with its signature)."""
    if provider.preset == "google" and metadata.issuer == GOOGLE_ISSUER:
        return [GOOGLE_ISSUER, "accounts.google.com"]
    if provider.preset == "microsoft" and MICROSOFT_TENANT_PLACEHOLDER in metadata.issuer:
        tid = _unverified_claims(id_token).get("tid")
        if not isinstance(tid, str) or not _TENANT_ID.match(tid):
            return []  # nothing matches: the token is refused as an issuer mismatch
        if _microsoft_tenant(provider) == "organizations" and tid == MICROSOFT_CONSUMERS_TENANT:
            return []  # a personal account where only work and school accounts may sign in
        return [metadata.issuer.replace(MICROSOFT_TENANT_PLACEHOLDER, tid)]
    return [metadata.issuer]


def _unverified_claims(id_token: str) -> dict[str, Any]:
    # Only to pick the expected issuer; the signature is checked together with it.
    try:
        claims = jwt.decode(id_token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return {}
    return claims if isinstance(claims, dict) else {}


def vouch(provider: OAuthProviderSettings, identity: VerifiedIdentity) -> VerifiedIdentity:
    """The identity with email_verified as this provider's claims justify it."""
    if provider.preset != "microsoft" or identity.email_verified:
        return identity
    claims = identity.claims
    edov = claims.get("xms_edov")
    verified = (
        edov is True
        or (isinstance(edov, str) and edov.lower() in {"1", "true"})
        or claims.get("tid") == MICROSOFT_CONSUMERS_TENANT
    )
    return replace(identity, email_verified=verified)


def with_names(identity: VerifiedIdentity, user_field: str | None) -> VerifiedIdentity:
    """Apple sends the user's name once, in the first form_post's `user` field (JSON)."""
    if not user_field or (identity.given_name and identity.family_name):
        return identity
    try:
        data = orjson.loads(user_field[:4096])
        name = data.get("name") if isinstance(data, dict) else None
    except (orjson.JSONDecodeError, TypeError):
        return identity
    if not isinstance(name, dict):
        return identity

    def text(value: Any) -> str:
        return value.strip()[:100] if isinstance(value, str) else ""

    return replace(
        identity,
        given_name=identity.given_name or text(name.get("firstName")),
        family_name=identity.family_name or text(name.get("lastName")),
    )


def client_secret(
    provider: OAuthProviderSettings, metadata: ProviderMetadata, *, now: float | None = None
) -> str:
    """The client secret sent to the token endpoint: Apple's is an ES256 JWT signed now."""
    if provider.preset != "apple":
        return provider.client_secret
    issued = int(now if now is not None else time.time())
    pem = provider.client_secret.replace("\\n", "\n")
    try:
        return jwt.encode(
            {
                "iss": provider.option("TEAM_ID"),
                "iat": issued,
                "exp": issued + APPLE_SECRET_TTL_SECONDS,
                "aud": metadata.issuer,
                "sub": provider.client_id,
            },
            pem,
            algorithm="ES256",
            headers={"kid": provider.option("KEY_ID")},
        )
    except (ValueError, TypeError, jwt.PyJWTError):
        raise ProviderError(
            "OAUTH_APPLE_CLIENT_SECRET is not a usable P-256 private key (PEM)"
        ) from None


def github_metadata(provider: OAuthProviderSettings) -> ProviderMetadata:
    """GitHub has no discovery document: its fixed endpoints (or a GitHub Enterprise
    Server's)."""
    web = (provider.option("URL") or GITHUB_URL).rstrip("/")
    api = (provider.option("API_URL") or GITHUB_API_URL).rstrip("/")
    return ProviderMetadata(
        issuer=require_safe_url(web, what="OAUTH_GITHUB_URL"),
        authorization_endpoint=f"{web}/login/oauth/authorize",
        token_endpoint=f"{web}/login/oauth/access_token",
        jwks_uri="",
        token_auth_method="client_secret_post",
        userinfo_endpoint=require_safe_url(f"{api}/user", what="OAUTH_GITHUB_API_URL"),
    )


def github_identity(user: dict[str, Any], emails: list[Any]) -> VerifiedIdentity:
    """The GitHub user as an identity: its numeric id, and the primary address with GitHub's
    own `verified` flag (an unverified primary is refused by the caller, as for OIDC)."""
    user_id = user.get("id")
    if isinstance(user_id, bool) or not isinstance(user_id, int):
        raise ProviderError("GitHub user has no numeric id")
    primary = next(
        (e for e in emails if isinstance(e, dict) and e.get("primary") is True),
        None,
    )
    email = primary.get("email") if primary is not None else None
    # `name` is free text and may be null.
    given, _, family = (user.get("name") or "").strip().partition(" ")
    return VerifiedIdentity(
        subject=str(user_id),
        email=read_email(email),
        email_verified=primary is not None and primary.get("verified") is True,
        given_name=given[:100],
        family_name=family.strip()[:100],
    )
