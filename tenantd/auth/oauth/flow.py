"""Protocol pieces of the code flow: state cookie, PKCE, authorization URL, ID token checks.

The state cookie is a JWT (HS256, SECRET_KEY) with its own audience and purpose, so it can
never pass as an access token and an access token can never pass as a state cookie.
"""

from __future__ import annotations

import hmac
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import jwt
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from tenantd.addresses import normalize_email
from tenantd.auth.oauth.discovery import ProviderMetadata
from tenantd.auth.oauth.errors import (
    EMAIL_MISSING,
    FAILED,
    STATE_INVALID,
    OAuthRefused,
)
from tenantd.identity.settings import OAuthProviderSettings
from tenantd.settings import Settings

STATE_COOKIE = "oauth_state"
STATE_TTL_SECONDS = 600
STATE_AUDIENCE = "tenantd:oauth-state"
STATE_PURPOSE = "oauth_state"
STATE_ISSUER = "tenantd"
STATE_ALGORITHM = "HS256"

ID_TOKEN_ALGORITHMS = frozenset({"RS256", "ES256"})  # never none, never HS*
CLOCK_SKEW_SECONDS = 60
MAX_RETURN_TO = 2048
MAX_ID_TOKEN = 16 * 1024


def code_challenge(verifier: str) -> str:
    """PKCE S256: BASE64URL(SHA256(ASCII(code_verifier)))."""
    return str(create_s256_code_challenge(verifier))


def safe_return_to(value: str | None) -> str | None:
    """A same-origin relative path (`/x?y`), else None: no scheme, host or `//` trick."""
    if not value or len(value) > MAX_RETURN_TO or not value.startswith("/"):
        return None
    if value.startswith(("//", "/\\")) or "\\" in value:
        return None
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in value):
        return None  # whitespace and control characters: browsers strip some of them
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    return value


def redirect_uri(settings: Settings, provider: str) -> str:
    """The callback URL to register at the provider."""
    return f"{settings.public_base_url}/api/v1/auth/oauth/{provider}/callback"


def callback_path(settings: Settings, provider: str) -> str:
    """The browser-visible path of the callback, for the state cookie's Path."""
    return urlsplit(redirect_uri(settings, provider)).path


@dataclass(frozen=True)
class ReauthBinding:
    """A step-up flow: the signed-in user and session family that asked to prove themselves
    again at the provider (the callback refreshes that family's auth_time, no new session)."""

    user_id: uuid.UUID
    session_id: uuid.UUID


@dataclass(frozen=True)
class FlowState:
    provider: str
    state: str
    nonce: str
    code_verifier: str
    return_to: str | None
    jti: str
    expires_at: int
    reauth: ReauthBinding | None = None

    @property
    def issued_at(self) -> int:
        return self.expires_at - STATE_TTL_SECONDS


def new_flow_state(
    provider: str,
    return_to: str | None,
    *,
    now: float | None = None,
    reauth: ReauthBinding | None = None,
) -> FlowState:
    issued = int(now if now is not None else time.time())
    return FlowState(
        provider=provider,
        state=secrets.token_urlsafe(32),
        nonce=secrets.token_urlsafe(32),
        code_verifier=secrets.token_urlsafe(64),  # 86 characters, within RFC 7636's 43..128
        return_to=safe_return_to(return_to),
        jti=str(uuid.uuid4()),
        expires_at=issued + STATE_TTL_SECONDS,
        reauth=reauth,
    )


def encode_state(secret_key: str, flow: FlowState) -> str:
    payload = {
        "iss": STATE_ISSUER,
        "aud": STATE_AUDIENCE,
        "purpose": STATE_PURPOSE,
        "jti": flow.jti,
        "exp": flow.expires_at,
        "iat": flow.expires_at - STATE_TTL_SECONDS,
        "provider": flow.provider,
        "state": flow.state,
        "nonce": flow.nonce,
        "cv": flow.code_verifier,
        "rt": flow.return_to,
    }
    if flow.reauth is not None:
        payload["ra"] = {"u": str(flow.reauth.user_id), "s": str(flow.reauth.session_id)}
    return jwt.encode(payload, secret_key, algorithm=STATE_ALGORITHM)


def decode_state(secret_key: str, token: str | None, *, provider: str) -> FlowState:
    """The flow kept in the state cookie; missing, expired, tampered or foreign: refused."""
    if not token:
        raise OAuthRefused(STATE_INVALID, "state cookie missing")
    try:
        payload = jwt.decode(
            token,
            secret_key,
            algorithms=[STATE_ALGORITHM],
            audience=STATE_AUDIENCE,
            issuer=STATE_ISSUER,
            options={"require": ["exp", "aud", "iss", "jti", "state", "nonce", "cv", "purpose"]},
        )
    except jwt.ExpiredSignatureError:
        raise OAuthRefused(STATE_INVALID, "state cookie expired") from None
    except jwt.PyJWTError:
        raise OAuthRefused(STATE_INVALID, "state cookie invalid") from None
    if payload.get("purpose") != STATE_PURPOSE or payload.get("provider") != provider:
        raise OAuthRefused(STATE_INVALID, "state cookie belongs to another flow")
    fields = ("state", "nonce", "cv", "jti")
    if not all(isinstance(payload.get(name), str) and payload[name] for name in fields):
        raise OAuthRefused(STATE_INVALID, "state cookie invalid")
    return_to = payload.get("rt")
    reauth = _reauth_binding(payload.get("ra"))
    return FlowState(
        provider=provider,
        state=payload["state"],
        nonce=payload["nonce"],
        code_verifier=payload["cv"],
        return_to=safe_return_to(return_to) if isinstance(return_to, str) else None,
        jti=payload["jti"],
        expires_at=int(payload["exp"]),
        reauth=reauth,
    )


def _reauth_binding(value: Any) -> ReauthBinding | None:
    if value is None:
        return None
    try:
        return ReauthBinding(user_id=uuid.UUID(value["u"]), session_id=uuid.UUID(value["s"]))
    except (TypeError, KeyError, ValueError, AttributeError):
        raise OAuthRefused(STATE_INVALID, "state cookie invalid") from None


def check_state(flow: FlowState, returned: str | None) -> None:
    """The `state` the provider sent back must equal the cookie's (constant-time compare)."""
    if not returned or not hmac.compare_digest(returned.encode(), flow.state.encode()):
        raise OAuthRefused(STATE_INVALID, "state mismatch")


def authorization_url(
    metadata: ProviderMetadata,
    provider: OAuthProviderSettings,
    flow: FlowState,
    *,
    callback: str,
    scopes: tuple[str, ...] | None = None,
    openid: bool = True,
    response_mode: str | None = None,
) -> str:
    """The provider's authorization endpoint with the code-flow parameters added (an OpenID
    Connect request unless `openid` is false: then no `openid` scope and no nonce)."""
    parts = urlsplit(metadata.authorization_endpoint)
    kept = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in _FLOW_PARAMS
    ]
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
    wanted = provider.scopes if scopes is None else scopes
    step_up = flow.reauth is not None
    return str(
        prepare_grant_uri(
            base,
            client_id=provider.client_id,
            response_type="code",
            redirect_uri=callback,
            scope=_scopes(wanted) if openid else list(wanted),
            state=flow.state,
            nonce=flow.nonce if openid else None,
            code_challenge=code_challenge(flow.code_verifier),
            code_challenge_method="S256",
            response_mode=response_mode,
            # Step-up: the provider must authenticate the user now, not reuse its session.
            prompt="login" if step_up else None,
            max_age="0" if step_up else None,
        )
    )


_FLOW_PARAMS = frozenset(
    {
        "response_type",
        "client_id",
        "redirect_uri",
        "scope",
        "state",
        "nonce",
        "code_challenge",
        "code_challenge_method",
        "prompt",
        "max_age",
        "response_mode",
    }
)


def _scopes(scopes: tuple[str, ...]) -> list[str]:
    # `openid` makes it an OpenID Connect request; without it there is no ID token.
    return list(scopes) if "openid" in scopes else ["openid", *scopes]


@dataclass(frozen=True)
class IdTokenHeader:
    kid: str | None
    algorithm: str


def read_header(id_token: str) -> IdTokenHeader:
    """The unverified header, refusing any algorithm but RS256/ES256 up front."""
    if not id_token or len(id_token) > MAX_ID_TOKEN:
        raise OAuthRefused(FAILED, "id_token missing or too large")
    try:
        header = jwt.get_unverified_header(id_token)
    except jwt.PyJWTError:
        raise OAuthRefused(FAILED, "id_token malformed") from None
    algorithm = header.get("alg")
    if algorithm not in ID_TOKEN_ALGORITHMS:
        raise OAuthRefused(FAILED, f"id_token algorithm {str(algorithm)[:16]!r} refused")
    kid = header.get("kid")
    return IdTokenHeader(kid=kid if isinstance(kid, str) else None, algorithm=algorithm)


@dataclass(frozen=True)
class TokenAnswer:
    """What the token endpoint gave: the ID token, and a bearer access token for UserInfo."""

    id_token: str | None  # None: plain OAuth 2.0 (GitHub)
    access_token: str | None = None


@dataclass(frozen=True)
class VerifiedIdentity:
    subject: str
    email: str | None
    email_verified: bool
    given_name: str
    family_name: str
    # The ID token carries both `email` and `email_verified`; otherwise (OIDC Core 5.4) the
    # provider may hand them out from its UserInfo endpoint only.
    has_email_claims: bool = True
    auth_time: float | None = None  # when the provider last authenticated the user
    # Every verified ID token claim, for a preset's own rules (presets.vouch).
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def verify_id_token(
    id_token: str,
    key: Any,
    *,
    algorithm: str,
    issuer: str | list[str],
    client_id: str,
    nonce: str,
    now: float | None = None,
) -> VerifiedIdentity:
    """Signature, issuer, audience (and azp), expiry, iat and nonce; then the identity."""
    if algorithm not in ID_TOKEN_ALGORITHMS:
        raise OAuthRefused(FAILED, "id_token algorithm refused")
    try:
        claims = jwt.decode(
            id_token,
            key,
            algorithms=[algorithm],
            audience=client_id,
            issuer=issuer,
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["iss", "sub", "aud", "exp", "iat"]},
        )
    except jwt.ExpiredSignatureError:
        raise OAuthRefused(FAILED, "id_token expired") from None
    except jwt.InvalidAudienceError:
        raise OAuthRefused(FAILED, "id_token audience mismatch") from None
    except jwt.InvalidIssuerError:
        raise OAuthRefused(FAILED, "id_token issuer mismatch") from None
    except jwt.InvalidSignatureError:
        raise OAuthRefused(FAILED, "id_token signature invalid") from None
    except jwt.PyJWTError as exc:
        raise OAuthRefused(FAILED, f"id_token invalid ({type(exc).__name__})") from None
    current = now if now is not None else time.time()
    issued_at = claims.get("iat")
    if not isinstance(issued_at, (int, float)) or issued_at > current + CLOCK_SKEW_SECONDS:
        raise OAuthRefused(FAILED, "id_token issued in the future")
    audience = claims["aud"]
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise OAuthRefused(FAILED, "id_token authorized party mismatch")
    token_nonce = claims.get("nonce")
    if not isinstance(token_nonce, str) or not hmac.compare_digest(
        token_nonce.encode(), nonce.encode()
    ):
        raise OAuthRefused(FAILED, "id_token nonce mismatch")
    subject = claims["sub"]
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise OAuthRefused(FAILED, "id_token subject invalid")
    return VerifiedIdentity(
        subject=subject,
        email=_email(claims.get("email")),
        email_verified=_verified(claims.get("email_verified")),
        given_name=_name(claims.get("given_name")),
        family_name=_name(claims.get("family_name")),
        has_email_claims=claims.get("email") is not None
        and claims.get("email_verified") is not None,
        auth_time=_auth_time(claims.get("auth_time")),
        claims=claims,
    )


def merge_userinfo(identity: VerifiedIdentity, claims: dict[str, Any]) -> VerifiedIdentity:
    """The identity completed with UserInfo claims (OIDC Core 5.3.2: its `sub` must be the ID
    token's, else nothing of it is used). Email and email_verified come as a pair from one
    source, read by the same rules as ID token claims; names fill in what the token lacks."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not hmac.compare_digest(
        subject.encode(), identity.subject.encode()
    ):
        raise OAuthRefused(FAILED, "userinfo sub does not match the id_token")
    email, verified = identity.email, identity.email_verified
    if claims.get("email") is not None:
        email, verified = _email(claims.get("email")), _verified(claims.get("email_verified"))
    return VerifiedIdentity(
        subject=identity.subject,
        email=email,
        email_verified=verified,
        given_name=identity.given_name or _name(claims.get("given_name")),
        family_name=identity.family_name or _name(claims.get("family_name")),
        has_email_claims=True,
        auth_time=identity.auth_time,
        claims=identity.claims,
    )


def read_email(value: Any) -> str | None:
    """A provider's address claim in the normal form, or None when it is not one."""
    return _email(value)


def _email(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    local, at, domain = value.rpartition("@")
    if not at or not local or "." not in domain or len(value) > 254:
        return None
    if any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        return None
    return normalize_email(value)


def _auth_time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _verified(value: Any) -> bool:
    # Booleans per the spec; some providers (AWS Cognito) send the string "true".
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _name(value: Any) -> str:
    return value.strip()[:100] if isinstance(value, str) else ""


def require_email(identity: VerifiedIdentity) -> str:
    if identity.email is None:
        raise OAuthRefused(EMAIL_MISSING, "id_token carries no usable email")
    return identity.email
