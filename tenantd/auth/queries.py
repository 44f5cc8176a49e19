"""Queries of the auth domain's own answers; each takes the connection it is given.

The tables of users, sessions and tokens are identity's: their queries live in
tenantd/identity/queries.py.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import func

from tenantd.db import Conn, Row, tables
from tenantd.db.predicates import exists
from tenantd.ops.queries import Purge

# -- email change (tenantd/auth/email_change.py) ----------------------------------------------


async def drop_pending_email_changes(conn: Conn, *, user_id: uuid.UUID) -> None:
    """A new request replaces the pending one (its notice was mailed again)."""
    await conn.execute(
        "DELETE FROM email_changes WHERE user_id = %(u)s"
        " AND confirmed_at IS NULL AND cancelled_at IS NULL",
        {"u": user_id},
    )


async def insert_email_change(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    old_email: str,
    new_email: str,
    confirm_hash: bytes,
    cancel_hash: bytes,
    ttl_hours: int,
    cancel_days: int,
) -> uuid.UUID:
    change_id: uuid.UUID = await conn.fetch_val(
        "INSERT INTO email_changes (user_id, old_email, new_email, confirm_hash, cancel_hash,"
        " expires_at, cancel_until) VALUES (%(u)s, %(o)s, %(n)s, %(c)s, %(x)s,"
        " now() + make_interval(hours => %(t)s), now() + make_interval(days => %(d)s))"
        " RETURNING id",
        {
            "u": user_id,
            "o": old_email,
            "n": new_email,
            "c": confirm_hash,
            "x": cancel_hash,
            "t": ttl_hours,
            "d": cancel_days,
        },
    )
    return change_id


async def email_change_owner(conn: Conn, *, column: str, token_hash: bytes) -> uuid.UUID | None:
    """The user of the change a link names, without a lock (to lock the user first)."""
    assert column in ("confirm_hash", "cancel_hash")
    owner: uuid.UUID | None = await conn.fetch_val(
        f"SELECT user_id FROM email_changes WHERE {column} = %(h)s", {"h": token_hash}
    )
    return owner


async def lock_email_change(conn: Conn, *, column: str, token_hash: bytes) -> Row | None:
    """The change a link names (`confirm_hash` or `cancel_hash`), locked, with its timing."""
    assert column in ("confirm_hash", "cancel_hash")
    return await conn.fetch_one(
        "SELECT id, user_id, old_email, new_email, confirmed_at, cancelled_at,"
        " expires_at > now() AS confirmable, cancel_until > now() AS cancellable"
        f" FROM email_changes WHERE {column} = %(h)s FOR UPDATE",
        {"h": token_hash},
    )


async def finish_email_change(conn: Conn, *, change_id: uuid.UUID, outcome: str) -> None:
    assert outcome in ("confirmed_at", "cancelled_at")
    await conn.execute(
        f"UPDATE email_changes SET {outcome} = now() WHERE id = %(i)s", {"i": change_id}
    )


async def cancel_email_changes_since(
    conn: Conn, *, user_id: uuid.UUID, change_id: uuid.UUID
) -> None:
    """End a change and every change of the user made after it (and their links)."""
    await conn.execute(
        "UPDATE email_changes SET cancelled_at = now() WHERE user_id = %(u)s"
        " AND cancelled_at IS NULL AND created_at >="
        " (SELECT created_at FROM email_changes WHERE id = %(c)s)",
        {"u": user_id, "c": change_id},
    )


async def email_in_use(conn: Conn, email: str) -> bool:
    return await exists(conn, "SELECT 1 FROM users WHERE lower(email) = lower(%(e)s)", {"e": email})


# -- delete my user, export (tenantd/auth/deletion.py) ----------------------------------------


async def lock_owned_accounts(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    """The live accounts the user owns, locked (a concurrent join waits), with their other
    active members counted."""
    return await conn.fetch_all(
        "SELECT a.id, (SELECT count(*) FROM memberships o WHERE o.account_id = a.id"
        "   AND o.revoked_at IS NULL AND o.user_id <> %(u)s) AS others"
        " FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " WHERE m.user_id = %(u)s AND m.role = 'owner' AND m.revoked_at IS NULL"
        " AND a.deleted_at IS NULL ORDER BY a.id FOR UPDATE OF a",
        {"u": user_id},
    )


async def drop_credentials(conn: Conn, user_id: uuid.UUID) -> None:
    """Password, identities, links, push subscriptions and pending email changes go."""
    for table in (
        "user_passwords",
        "user_identities",
        "user_tokens",
        "push_subscriptions",
        "email_changes",
    ):
        await conn.execute(f"DELETE FROM {table} WHERE user_id = %(u)s", {"u": user_id})


async def count_users_to_anonymize(conn: Conn, *, older_than_days: int) -> int:
    return int(
        await conn.fetch_val(
            "SELECT count(*) FROM users WHERE deleted_at IS NOT NULL AND anonymized_at IS NULL"
            " AND deleted_at < now() - make_interval(days => %(d)s)",
            {"d": older_than_days},
        )
    )


async def lock_users_to_anonymize(conn: Conn, *, older_than_days: int, limit: int) -> list[Row]:
    return await conn.fetch_all(
        "SELECT id FROM users WHERE deleted_at IS NOT NULL AND anonymized_at IS NULL"
        " AND deleted_at < now() - make_interval(days => %(d)s)"
        " ORDER BY deleted_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED",
        {"d": older_than_days, "n": limit},
    )


EXPORT_QUERIES = {
    "user": "SELECT id, email, first_name, last_name, email_verified_at, created_at, updated_at,"
    " (SELECT created_at FROM user_passwords p WHERE p.user_id = u.id) AS password_set_at"
    " FROM users u WHERE id = %(u)s",
    "identities": "SELECT provider, email, created_at FROM user_identities WHERE user_id = %(u)s"
    " ORDER BY created_at",
    "memberships": "SELECT m.account_id, a.name AS account_name, m.role, m.created_at,"
    " m.revoked_at FROM memberships m JOIN accounts a ON a.id = m.account_id"
    " WHERE m.user_id = %(u)s ORDER BY m.created_at",
    "sessions": "SELECT id, created_at, expires_at, revoked_at, user_agent, ip FROM sessions"
    " WHERE user_id = %(u)s ORDER BY created_at",
    "notifications": "SELECT id, account_id, event_type, title, body, cta_url, cta_label, status,"
    " read_at, created_at FROM notifications WHERE user_id = %(u)s ORDER BY created_at",
    "notification_preferences": "SELECT event_type, channel, enabled, updated_at"
    " FROM notification_preferences WHERE user_id = %(u)s ORDER BY event_type, channel",
    "notification_frequencies": "SELECT event_type, channel, frequency, updated_at"
    " FROM notification_frequencies WHERE user_id = %(u)s ORDER BY event_type, channel",
    "push_subscriptions": "SELECT endpoint, user_agent, created_at, last_used_at"
    " FROM push_subscriptions WHERE user_id = %(u)s ORDER BY created_at",
    "email_changes": "SELECT old_email, new_email, created_at, confirmed_at, cancelled_at"
    " FROM email_changes WHERE user_id = %(u)s ORDER BY created_at",
    "audit_log": "SELECT account_id, action, target, data, created_at FROM audit_log"
    " WHERE actor_user_id = %(u)s ORDER BY created_at, id",
}


async def export_rows(conn: Conn, user_id: uuid.UUID) -> dict[str, list[Row]]:
    return {name: await conn.fetch_all(sql, {"u": user_id}) for name, sql in EXPORT_QUERIES.items()}


# -- sign-in by email (issue 29): one live code and magic link per address -------------------


async def replace_email_code(
    conn: Conn, *, email: str, code_hash: bytes, link_hash: bytes, expires_at: object
) -> None:
    """The address's new code and link; the previous ones (and their wrong attempts) end."""
    await conn.execute(
        "INSERT INTO email_codes (email, code_hash, link_hash, attempts, expires_at)"
        " VALUES (%(e)s, %(c)s, %(l)s, 0, %(x)s)"
        " ON CONFLICT (email) DO UPDATE SET code_hash = EXCLUDED.code_hash,"
        " link_hash = EXCLUDED.link_hash, attempts = 0, created_at = now(),"
        " expires_at = EXCLUDED.expires_at",
        {"e": email, "c": code_hash, "l": link_hash, "x": expires_at},
    )


async def lock_email_code(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM email_codes WHERE email = %(e)s FOR UPDATE", {"e": email}
    )


async def lock_email_link(conn: Conn, link_hash: bytes) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM email_codes WHERE link_hash = %(l)s FOR UPDATE", {"l": link_hash}
    )


async def count_wrong_code(conn: Conn, email: str) -> None:
    await conn.execute(
        "UPDATE email_codes SET attempts = attempts + 1 WHERE email = %(e)s", {"e": email}
    )


async def delete_email_code(conn: Conn, email: str) -> None:
    await conn.execute("DELETE FROM email_codes WHERE email = %(e)s", {"e": email})


# -- "This wasn't me" of a password change or a user deletion (auth/security_undo.py) --------


def expired_email_codes() -> Purge:
    """Sign-in codes and magic links a day after expiry (the auth part of the session sweep)."""
    return tables.email_codes, tables.email_codes.c.expires_at < func.now() - timedelta(days=1)
