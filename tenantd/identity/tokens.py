"""Access tokens (JWTs signed by the keyring: EdDSA, ES256 or HS256, via PyJWT) and opaque
tokens stored only as keyed hashes."""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import time
import uuid
from functools import lru_cache

from tenantd.errors import Unauthorized
from tenantd.identity.keys.keyring import Keyring, UntrustedToken
from tenantd.principal import AccessClaims

ISSUER = "tenantd"
ACCESS_TTL_SECONDS = 15 * 60


def new_opaque_token() -> str:
    """A 256-bit URL-safe random token (refresh, verification, reset, invitation)."""
    return secrets.token_urlsafe(32)


def token_hash(secret_key: str, token: str) -> bytes:
    """HMAC-SHA256(server secret, token): what the database stores instead of the token.
    (`hmac.digest` is the one-shot C path: no HMAC object per API-key check.)"""
    return hmac.digest(secret_key.encode(), token.encode(), "sha256")


# Refresh tokens read `<family>.<tag>.<secret>`: the family id and a keyed tag over it (so a
# token rotated out long ago, whose row is gone, is still known as its family's, and nobody
# can name a family without having held one of its tokens), then 256 secret bits.
_FAMILY_TAG = b"tenantd:refresh-family:"
_SUCCESSOR = b"tenantd:refresh-successor:"
_TAG_BYTES = 16


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _family_part(secret_key: str, family_id: uuid.UUID) -> str:
    tag = hmac.digest(secret_key.encode(), _FAMILY_TAG + family_id.bytes, "sha256")
    return f"{_b64(family_id.bytes)}.{_b64(tag[:_TAG_BYTES])}"


def new_refresh_token(secret_key: str, family_id: uuid.UUID) -> str:
    """The first refresh token of a session family."""
    return f"{_family_part(secret_key, family_id)}.{new_opaque_token()}"


def successor_refresh_token(secret_key: str, token: str, family_id: uuid.UUID) -> str:
    """The token that replaces `token` on rotation: derived, not random, so a repeat of the
    same rotation (two tabs refreshing at once) answers the same successor without any
    token being stored."""
    secret = hmac.digest(secret_key.encode(), _SUCCESSOR + token.encode(), "sha256")
    return f"{_family_part(secret_key, family_id)}.{_b64(secret)}"


def refresh_token_family(secret_key: str, token: str) -> uuid.UUID | None:
    """The family a refresh token names, if its tag is ours; None for anything else."""
    family_b64, _, rest = token.partition(".")
    tag_b64, _, secret = rest.partition(".")
    if not secret or len(family_b64) != 22 or len(tag_b64) != 22:
        return None
    try:
        family_id = uuid.UUID(bytes=_unb64(family_b64))
    except (binascii.Error, ValueError):
        return None
    expected = _family_part(secret_key, family_id)
    if not hmac.compare_digest(expected.encode(), f"{family_b64}.{tag_b64}".encode()):
        return None
    return family_id


def issue_access_token(
    keyring: Keyring,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    now: float | None = None,
    jti: uuid.UUID | None = None,
    session_id: uuid.UUID | None = None,
    amr: tuple[str, ...] = (),
    auth_time: float | None = None,
    act: str | None = None,
    not_after: float | None = None,
) -> tuple[str, AccessClaims]:
    """`act`: the operator impersonating the user (the `act` claim, RFC 8693); `not_after`
    caps the expiry (an impersonation session's tokens never outlive it)."""
    # Millisecond iat so a cutoff set earlier in the same second is still told apart.
    issued_at = round(now if now is not None else time.time(), 3)
    expires_at = issued_at + ACCESS_TTL_SECONDS
    if not_after is not None:
        expires_at = min(expires_at, not_after)
    claims = AccessClaims(
        user_id=user_id,
        account_id=account_id,
        jti=jti or uuid.uuid4(),
        issued_at=issued_at,
        expires_at=expires_at,
        session_id=session_id,
        amr=tuple(amr),
        auth_time=int(auth_time) if auth_time is not None else None,
        act=act,
    )
    payload: dict[str, object] = {
        "sub": str(user_id),
        "aid": str(account_id) if account_id else None,
        "sid": str(session_id) if session_id else None,
        "jti": str(claims.jti),
        "iat": claims.issued_at,
        "exp": int(claims.expires_at),
        "iss": ISSUER,
    }
    if claims.amr:
        payload["amr"] = list(claims.amr)
    if claims.auth_time is not None:
        payload["auth_time"] = claims.auth_time
    if claims.act is not None:
        payload["act"] = {"sub": claims.act}
    return keyring.sign(payload), claims


def decode_access_token(keyring: Keyring, token: str) -> AccessClaims:
    """Verify signature (with the key its `kid` names, in that key's algorithm), issuer,
    audience and expiry; any failure is invalid_session.

    A token string verified once means the same thing until it expires, so successful
    verifications are memoised (bounded, per keyring); expiry and the trust in its key
    (a key withdrawn, or past its not_after) are still checked on every use, and failures
    are never cached.
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise Unauthorized("invalid_session", "Session is invalid or expired")
    claims, kid = _verified(keyring, token)
    if claims.expires_at <= time.time() or not keyring.trusts(kid):
        raise Unauthorized("invalid_session", "Session is invalid or expired")
    return claims


MAX_TOKEN_LENGTH = 2048  # ours are ~450 bytes; do not let huge strings into the memo
REQUIRED_CLAIMS = ["sub", "jti", "iat", "exp", "iss"]


@lru_cache(maxsize=100_000)
def _verified(keyring: Keyring, token: str) -> tuple[AccessClaims, str | None]:
    try:
        payload, kid = keyring.decode(token, issuer=ISSUER, require=REQUIRED_CLAIMS)
        aid = payload.get("aid")
        sid = payload.get("sid")
        amr = payload.get("amr") or []
        auth_time = payload.get("auth_time")
        act = payload.get("act")
        claims = AccessClaims(
            user_id=uuid.UUID(str(payload["sub"])),
            account_id=uuid.UUID(str(aid)) if aid else None,
            jti=uuid.UUID(str(payload["jti"])),
            issued_at=float(payload["iat"]),
            expires_at=float(payload["exp"]),
            session_id=uuid.UUID(str(sid)) if sid else None,
            amr=tuple(str(method) for method in amr),
            auth_time=float(auth_time) if auth_time is not None else None,
            act=str(act["sub"]) if isinstance(act, dict) and act.get("sub") else None,
        )
        return claims, kid
    except (UntrustedToken, ValueError, TypeError, KeyError):
        raise Unauthorized("invalid_session", "Session is invalid or expired") from None
