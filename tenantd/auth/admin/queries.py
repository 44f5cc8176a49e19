"""Statements of the operators' user administration (sql/0290): the user list and search,
one user with memberships and sign-in methods, disabling, impersonation links."""

from __future__ import annotations

import datetime as dt
import uuid

from tenantd.db import Conn, Row

_ITEM = (
    "SELECT u.id, u.email, u.email_verified_at, u.disabled_at, u.created_at, u.last_sign_in_at"
    " FROM users u"
)
# The expression of the trigram index users_search_trgm_idx (sql/0290), spelled the same.
_SEARCHED = "lower(u.email || ' ' || u.first_name || ' ' || u.last_name)"
TRIGRAM_MIN = 3  # shorter queries use the email prefix index (trigrams need three characters)


def like_escape(text: str) -> str:
    """`text` matched literally inside a LIKE pattern (backslash is LIKE's escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def search_users(
    conn: Conn,
    *,
    query: str | None,
    after: tuple[dt.datetime, uuid.UUID] | None,
    limit: int,
) -> list[Row]:
    """Live users newest first, after a keyset position, `limit` of them. A query of three
    characters or more matches anywhere in email and names (trigram index); a shorter one
    matches the start of the email (prefix index)."""
    where = ["u.deleted_at IS NULL"]
    params: dict[str, object] = {"limit": limit}
    if query:
        needle = like_escape(query.lower())
        if len(query) >= TRIGRAM_MIN:
            where.append(f"{_SEARCHED} LIKE %(pattern)s")
            params["pattern"] = f"%{needle}%"
        else:
            where.append("lower(u.email) LIKE %(pattern)s")
            params["pattern"] = f"{needle}%"
    if after is not None:
        where.append("(u.created_at, u.id) < (%(after_at)s, %(after_id)s)")
        params["after_at"], params["after_id"] = after
    return await conn.fetch_all(
        f"{_ITEM} WHERE {' AND '.join(where)}"
        " ORDER BY u.created_at DESC, u.id DESC LIMIT %(limit)s",
        params,
    )


async def user_item(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """One live user as the list shows it."""
    return await conn.fetch_one(
        f"{_ITEM} WHERE u.id = %(u)s AND u.deleted_at IS NULL", {"u": user_id}
    )


async def user_id_by_email(conn: Conn, email: str) -> uuid.UUID | None:
    value: uuid.UUID | None = await conn.fetch_val(
        "SELECT id FROM users WHERE lower(email) = lower(%(e)s) AND deleted_at IS NULL",
        {"e": email},
    )
    return value


async def memberships(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    """The user's active memberships in live accounts."""
    return await conn.fetch_all(
        "SELECT a.id AS account_id, a.name, m.role, m.created_at FROM memberships m"
        " JOIN accounts a ON a.id = m.account_id"
        " WHERE m.user_id = %(u)s AND m.revoked_at IS NULL AND a.deleted_at IS NULL"
        " ORDER BY m.created_at",
        {"u": user_id},
    )


async def auth_providers(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    """How the user can sign in: a password, each linked provider, each passkey."""
    return await conn.fetch_all(
        "SELECT 'password' AS provider, NULL::text AS detail, created_at"
        " FROM user_passwords WHERE user_id = %(u)s"
        " UNION ALL SELECT provider, email, created_at FROM user_identities"
        " WHERE user_id = %(u)s"
        " UNION ALL SELECT 'passkey', name, created_at FROM passkeys WHERE user_id = %(u)s"
        " ORDER BY created_at",
        {"u": user_id},
    )


async def lock_live_user(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one(
        "SELECT id, email, email_verified_at, disabled_at FROM users"
        " WHERE id = %(u)s AND deleted_at IS NULL FOR UPDATE",
        {"u": user_id},
    )


async def insert_impersonation_link(
    conn: Conn,
    *,
    token_hash: bytes,
    user_id: uuid.UUID,
    actor: str,
    reason: str,
    ttl: dt.timedelta,
) -> uuid.UUID:
    link_id: uuid.UUID = await conn.fetch_val(
        "INSERT INTO impersonation_links (token_hash, user_id, actor, reason, expires_at)"
        " VALUES (%(h)s, %(u)s, %(a)s, %(r)s, now() + %(ttl)s) RETURNING id",
        {"h": token_hash, "u": user_id, "a": actor, "r": reason, "ttl": ttl},
    )
    return link_id


async def spend_impersonation_link(conn: Conn, token_hash: bytes) -> Row | None:
    """Use a live link once: the first caller gets its row, every later one (or an expired
    link) None; two concurrent uses are serialised by the row lock of the UPDATE."""
    return await conn.fetch_one(
        "UPDATE impersonation_links SET used_at = now()"
        " WHERE token_hash = %(h)s AND used_at IS NULL AND expires_at > now()"
        " RETURNING id, user_id, actor, reason",
        {"h": token_hash},
    )


async def link_session(conn: Conn, link_id: uuid.UUID, family_id: uuid.UUID | None) -> None:
    await conn.execute(
        "UPDATE impersonation_links SET family_id = %(f)s WHERE id = %(id)s",
        {"f": family_id, "id": link_id},
    )
