"""Access tokens (JWT HS256 via PyJWT) and opaque tokens stored only as keyed hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import uuid
from functools import lru_cache

import jwt

from tenantd.errors import Unauthorized
from tenantd.principal import AccessClaims

ISSUER = "tenantd"
ALGORITHM = "HS256"
ACCESS_TTL_SECONDS = 15 * 60


def new_opaque_token() -> str:
    """A 256-bit URL-safe random token (refresh, verification, reset, invitation)."""
    return secrets.token_urlsafe(32)


def token_hash(secret_key: str, token: str) -> bytes:
    """HMAC-SHA256(server secret, token): what the database stores instead of the token."""
    return hmac.new(secret_key.encode(), token.encode(), hashlib.sha256).digest()


def issue_access_token(
    secret_key: str,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    now: float | None = None,
    jti: uuid.UUID | None = None,
) -> tuple[str, AccessClaims]:
    # Millisecond iat so a cutoff set earlier in the same second is still told apart.
    issued_at = round(now if now is not None else time.time(), 3)
    claims = AccessClaims(
        user_id=user_id,
        account_id=account_id,
        jti=jti or uuid.uuid4(),
        issued_at=issued_at,
        expires_at=issued_at + ACCESS_TTL_SECONDS,
    )
    payload = {
        "sub": str(user_id),
        "aid": str(account_id) if account_id else None,
        "jti": str(claims.jti),
        "iat": claims.issued_at,
        "exp": int(claims.expires_at),
        "iss": ISSUER,
    }
    return jwt.encode(payload, secret_key, algorithm=ALGORITHM), claims


def decode_access_token(secret_key: str, token: str) -> AccessClaims:
    """Verify signature, algorithm, issuer and expiry; any failure is invalid_session.

    A token string verified once means the same thing until it expires, so successful
    verifications are memoised (bounded); expiry is still checked on every use, and
    failures are never cached.
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise Unauthorized("invalid_session", "Session is invalid or expired")
    claims = _verified(secret_key, token)
    if claims.expires_at <= time.time():
        raise Unauthorized("invalid_session", "Session is invalid or expired")
    return claims


MAX_TOKEN_LENGTH = 2048  # ours are ~300 bytes; do not let huge strings into the memo


@lru_cache(maxsize=100_000)
def _verified(secret_key: str, token: str) -> AccessClaims:
    try:
        payload = jwt.decode(
            token,
            secret_key,
            algorithms=[ALGORITHM],  # never "none", never an asymmetric algorithm
            issuer=ISSUER,
            options={"require": ["sub", "jti", "iat", "exp", "iss"]},
        )
        aid = payload.get("aid")
        return AccessClaims(
            user_id=uuid.UUID(str(payload["sub"])),
            account_id=uuid.UUID(str(aid)) if aid else None,
            jti=uuid.UUID(str(payload["jti"])),
            issued_at=float(payload["iat"]),
            expires_at=float(payload["exp"]),
        )
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        raise Unauthorized("invalid_session", "Session is invalid or expired") from None
