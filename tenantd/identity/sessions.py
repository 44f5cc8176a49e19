"""Sessions: issue, rotate (refresh), revoke. Refresh tokens are stored only as keyed hashes."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.errors import Unauthorized
from tenantd.identity import queries
from tenantd.identity.tokens import AccessClaims, issue_access_token, new_opaque_token, token_hash
from tenantd.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IssuedTokens:
    access_token: str
    access: AccessClaims
    refresh_token: str
    refresh_expires_at: dt.datetime


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def issue_session(
    conn: Conn,
    settings: Settings,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    user_agent: str | None = None,
    ip: str | None = None,
    family_id: uuid.UUID | None = None,
) -> IssuedTokens:
    """Create a refresh session row and a matching access token."""
    access_token, claims = issue_access_token(
        settings.secret_key, user_id=user_id, account_id=account_id
    )
    refresh = new_opaque_token()
    expires_at = _utcnow() + dt.timedelta(days=settings.refresh_token_ttl_days)
    await queries.insert_session(
        conn,
        family_id=family_id or uuid.uuid4(),
        user_id=user_id,
        account_id=account_id,
        token_hash=token_hash(settings.secret_key, refresh),
        expires_at=expires_at,
        access_jti=claims.jti,
        user_agent=user_agent,
        ip=ip,
    )
    return IssuedTokens(access_token, claims, refresh, expires_at)


def _refused(reason: str) -> Unauthorized:
    log.info("refresh refused", extra={"reason": reason})
    return Unauthorized("invalid_session", "Session is invalid or expired")


# The whole good path of a refresh in one atomic statement: lock the presented session while
# it is renewable (not revoked, rotated or expired; created after the user's cutoff; its aid
# membership active), mark it rotated, insert the next session of the family, return the user.
# A concurrent second use waits on the lock, re-checks, finds it rotated and returns nothing.
ROTATE = Prepared(
    "tenantd_rotate_session",
    """
WITH old AS (
    SELECT s.id, s.family_id, s.user_id, s.account_id
      FROM sessions s JOIN users u ON u.id = s.user_id
     WHERE s.token_hash = %(old)s::bytea
       AND s.revoked_at IS NULL AND s.rotated_at IS NULL AND s.expires_at > now()
       AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)
       AND (s.account_id IS NULL OR EXISTS (
            SELECT 1 FROM memberships m JOIN accounts a ON a.id = m.account_id
             WHERE m.user_id = s.user_id AND m.account_id = s.account_id
               AND m.revoked_at IS NULL AND a.deleted_at IS NULL))
       FOR UPDATE OF s
), rotated AS (
    UPDATE sessions SET rotated_at = now() FROM old WHERE sessions.id = old.id
    RETURNING old.family_id, old.user_id, old.account_id
), issued AS (
    INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at, access_jti,
                          user_agent, ip)
    SELECT family_id, user_id, account_id, %(new)s::bytea, %(expires)s::timestamptz,
           %(jti)s::uuid, %(ua)s::text, %(ip)s::text
      FROM rotated
    RETURNING user_id, account_id
)
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at, i.account_id
  FROM issued i JOIN users u ON u.id = i.user_id
""",
)


async def rotate_fast(
    conn: Conn,
    settings: Settings,
    *,
    refresh_token: str,
    user_agent: str | None = None,
    ip: str | None = None,
) -> tuple[IssuedTokens, Row] | None:
    """Renew in one round trip; None when the session is not renewable (see `rotate`)."""
    refresh = new_opaque_token()
    jti = uuid.uuid4()
    expires_at = _utcnow() + dt.timedelta(days=settings.refresh_token_ttl_days)
    user = await conn.fetch_one(
        ROTATE,
        {
            "old": token_hash(settings.secret_key, refresh_token),
            "new": token_hash(settings.secret_key, refresh),
            "expires": expires_at,
            "jti": jti,
            "ua": (user_agent or "")[:512] or None,
            "ip": ip,
        },
    )
    if user is None:
        return None
    access_token, claims = issue_access_token(
        settings.secret_key, user_id=user["id"], account_id=user["account_id"], jti=jti
    )
    return IssuedTokens(access_token, claims, refresh, expires_at), user


async def rotate(
    conn: Conn,
    settings: Settings,
    *,
    refresh_token: str,
    user_agent: str | None = None,
    ip: str | None = None,
) -> IssuedTokens:
    """Refresh: one-time use. Reusing a rotated token revokes its whole family (theft signal).

    Refusals are raised after the transaction ends, so the family revocation is committed.
    """
    refusal: str | None = None
    issued: IssuedTokens | None = None
    async with conn.transaction():
        row = await queries.lock_session_by_hash(
            conn, token_hash(settings.secret_key, refresh_token)
        )
        refusal = await _refusal(conn, row)
        if refusal == "reused":
            assert row is not None
            await queries.revoke_family(conn, row["family_id"])
            log.warning("rotated refresh token reused; session family revoked")
        elif refusal is None:
            assert row is not None
            await conn.execute(
                "UPDATE sessions SET rotated_at = now() WHERE id = %(id)s", {"id": row["id"]}
            )
            issued = await issue_session(
                conn,
                settings,
                user_id=row["user_id"],
                account_id=row["account_id"],
                user_agent=user_agent,
                ip=ip,
                family_id=row["family_id"],
            )
    if issued is None:
        raise _refused(refusal or "unknown")
    return issued


async def _refusal(conn: Conn, row: Row | None) -> str | None:
    """Why a locked session row may not be renewed, or None when it may."""
    if row is None:
        return "unknown"
    if row["revoked_at"] is not None:
        return "revoked"
    if row["rotated_at"] is not None:
        return "reused"
    if row["expires_at"] <= _utcnow():
        return "expired"
    cutoff = row["tokens_valid_after"]
    if cutoff is not None and row["created_at"] < cutoff:
        return "cutoff"
    account_id = row["account_id"]
    if account_id is not None and (
        await queries.active_role(conn, user_id=row["user_id"], account_id=account_id) is None
    ):
        return "membership"
    return None


async def revoke_session(
    conn: Conn, settings: Settings, *, refresh_token: str | None, access: AccessClaims | None
) -> None:
    """Logout: end this session family and the access token in hand."""
    if refresh_token:
        row = await conn.fetch_one(
            "SELECT family_id FROM sessions WHERE token_hash = %(h)s",
            {"h": token_hash(settings.secret_key, refresh_token)},
        )
        if row is not None:
            await queries.revoke_family(conn, row["family_id"])
    if access is not None:
        await queries.revoke_jti(
            conn,
            jti=access.jti,
            user_id=access.user_id,
            expires_at=dt.datetime.fromtimestamp(access.expires_at, dt.UTC),
        )


async def revoke_all(conn: Conn, *, user_id: uuid.UUID) -> None:
    """User-wide cutoff: every access token issued before now and every session ends."""
    async with conn.transaction():
        await conn.execute(
            "UPDATE users SET tokens_valid_after = now(), updated_at = now() WHERE id = %(u)s",
            {"u": user_id},
        )
        await conn.execute(
            "UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s AND revoked_at IS NULL",
            {"u": user_id},
        )
