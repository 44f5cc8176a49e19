"""Queries of the auth domain; each takes the connection it is given."""

from __future__ import annotations

import datetime as dt
import uuid

from tenantd.db import Conn, Row

TOKEN_STATE_SQL = """
SELECT u.tokens_valid_after,
       EXISTS (SELECT 1 FROM revoked_tokens r WHERE r.jti = %(jti)s) AS revoked,
       (SELECT m.role FROM memberships m JOIN accounts a ON a.id = m.account_id
         WHERE m.user_id = u.id AND m.account_id = %(aid)s
           AND m.revoked_at IS NULL AND a.deleted_at IS NULL) AS role
  FROM users u
 WHERE u.id = %(uid)s
"""


async def token_state(
    conn: Conn, *, user_id: uuid.UUID, jti: uuid.UUID, account_id: uuid.UUID | None
) -> Row | None:
    """User cutoff, jti revocation and the role in the token's account, in one round trip."""
    return await conn.fetch_one(TOKEN_STATE_SQL, {"uid": user_id, "jti": jti, "aid": account_id})


async def user_by_id(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM users WHERE id = %(id)s", {"id": user_id})


async def lock_user(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM users WHERE id = %(id)s FOR UPDATE", {"id": user_id})


async def user_by_email(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT u.*, p.password_hash FROM users u"
        " LEFT JOIN user_passwords p ON p.user_id = u.id"
        " WHERE lower(u.email) = lower(%(email)s)",
        {"email": email.strip()},
    )


async def insert_session(
    conn: Conn,
    *,
    family_id: uuid.UUID,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    token_hash: bytes,
    expires_at: dt.datetime,
    access_jti: uuid.UUID,
    user_agent: str | None,
    ip: str | None,
) -> None:
    await conn.execute(
        "INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at,"
        " access_jti, user_agent, ip) VALUES (%(family)s, %(user)s, %(account)s, %(hash)s,"
        " %(expires)s, %(jti)s, %(ua)s, %(ip)s)",
        {
            "family": family_id,
            "user": user_id,
            "account": account_id,
            "hash": token_hash,
            "expires": expires_at,
            "jti": access_jti,
            "ua": (user_agent or "")[:512] or None,
            "ip": ip,
        },
    )


async def lock_session_by_hash(conn: Conn, token_hash: bytes) -> Row | None:
    return await conn.fetch_one(
        "SELECT s.*, u.tokens_valid_after FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.token_hash = %(hash)s FOR UPDATE OF s",
        {"hash": token_hash},
    )


async def revoke_family(conn: Conn, family_id: uuid.UUID) -> None:
    await conn.execute(
        "UPDATE sessions SET revoked_at = now() WHERE family_id = %(f)s AND revoked_at IS NULL",
        {"f": family_id},
    )


async def revoke_jti(
    conn: Conn, *, jti: uuid.UUID, user_id: uuid.UUID, expires_at: dt.datetime
) -> None:
    await conn.execute(
        "INSERT INTO revoked_tokens (jti, user_id, expires_at) VALUES (%(jti)s, %(u)s, %(e)s)"
        " ON CONFLICT (jti) DO NOTHING",
        {"jti": jti, "u": user_id, "e": expires_at},
    )


async def active_role(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID) -> str | None:
    return await conn.fetch_val(
        "SELECT m.role FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " WHERE m.user_id = %(u)s AND m.account_id = %(a)s AND m.revoked_at IS NULL"
        " AND a.deleted_at IS NULL",
        {"u": user_id, "a": account_id},
    )


async def default_account_id(conn: Conn, user_id: uuid.UUID) -> uuid.UUID | None:
    """The account a fresh login lands in: the user's owned account, else the oldest."""
    return await conn.fetch_val(
        "SELECT m.account_id FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " WHERE m.user_id = %(u)s AND m.revoked_at IS NULL AND a.deleted_at IS NULL"
        " ORDER BY (m.role = 'owner') DESC, m.created_at, m.account_id LIMIT 1",
        {"u": user_id},
    )
