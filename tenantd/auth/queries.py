"""Queries of the auth domain's own answers; each takes the connection it is given.

The tables of users, sessions and tokens are identity's: their queries live in
tenantd/identity/queries.py.
"""

from __future__ import annotations

import datetime as dt
import uuid

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared

# One round trip: user, providers, memberships, the active account's plan and overrides and a
# custom role's permissions there.
ME = Prepared(
    "tenantd_me",
    """
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at, u.mfa_enabled,
       (p.user_id IS NOT NULL) AS has_password,
       p.created_at AS password_created_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', i.provider,
                                                    'createdAt', i.created_at)
                                  ORDER BY i.created_at)
                   FROM user_identities i WHERE i.user_id = u.id), '[]') AS identities,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('accountId', m.account_id,
                                                    'accountName', a.name,
                                                    'role', m.role,
                                                    'createdAt', m.created_at,
                                                    'requireMfa', a.require_mfa)
                                  ORDER BY m.created_at, m.account_id)
                   FROM memberships m JOIN accounts a ON a.id = m.account_id
                  WHERE m.user_id = u.id AND m.revoked_at IS NULL AND a.deleted_at IS NULL),
                '[]') AS memberships,
       (SELECT pl.features FROM account_plans ap JOIN plans pl ON pl.code = ap.plan_code
         WHERE ap.account_id = %(aid)s) AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(aid)s),
                '{}') AS overrides,
       (SELECT r.permissions FROM memberships m
          JOIN account_roles r ON r.account_id = m.account_id AND r.key = m.role
         WHERE m.user_id = u.id AND m.account_id = %(aid)s AND m.revoked_at IS NULL)
         AS role_permissions
  FROM users u
  LEFT JOIN user_passwords p ON p.user_id = u.id
 WHERE u.id = %(uid)s
""",
)


async def me(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID | None) -> Row | None:
    """The /me row of a user, with the plan and overrides of `account_id` (one round trip)."""
    return await conn.fetch_one(ME, {"uid": user_id, "aid": account_id})


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
    return bool(
        await conn.fetch_val(
            "SELECT EXISTS (SELECT 1 FROM users WHERE lower(email) = lower(%(e)s))", {"e": email}
        )
    )


async def set_user_email(conn: Conn, *, user_id: uuid.UUID, email: str) -> None:
    """The address changes and counts as verified (its owner clicked the link)."""
    await conn.execute(
        "UPDATE users SET email = %(e)s, email_verified_at = now(), updated_at = now()"
        " WHERE id = %(u)s",
        {"e": email, "u": user_id},
    )


async def drop_user_links(conn: Conn, *, user_id: uuid.UUID) -> None:
    """Verification and reset links mailed to the previous address stop working."""
    await conn.execute("DELETE FROM user_tokens WHERE user_id = %(u)s", {"u": user_id})


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


async def revoke_memberships_of(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "UPDATE memberships SET revoked_at = now(), updated_at = now()"
        " WHERE user_id = %(u)s AND revoked_at IS NULL"
        " RETURNING id, account_id, user_id, role, created_at, revoked_at",
        {"u": user_id},
    )


async def tombstone_user(conn: Conn, user_id: uuid.UUID) -> Row:
    """The address is released at once (kept aside in deleted_email for the grace window)."""
    row = await conn.fetch_one(
        "UPDATE users SET deleted_email = email, email = 'deleted+' || id::text || '@invalid',"
        " deleted_at = now(), updated_at = now() WHERE id = %(u)s RETURNING deleted_at",
        {"u": user_id},
    )
    assert row is not None
    return row


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


async def lock_users_to_anonymize(conn: Conn, *, older_than_days: int, limit: int) -> list[Row]:
    return await conn.fetch_all(
        "SELECT id FROM users WHERE deleted_at IS NOT NULL AND anonymized_at IS NULL"
        " AND deleted_at < now() - make_interval(days => %(d)s)"
        " ORDER BY deleted_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED",
        {"d": older_than_days, "n": limit},
    )


async def anonymize_users(conn: Conn, user_ids: list[uuid.UUID]) -> None:
    """Names and the kept address cleared; the user's notifications, preferences and
    sessions deleted. The row stays (audit rows and memberships point at its id)."""
    ids = {"ids": user_ids}
    await conn.execute(
        "UPDATE users SET first_name = '', last_name = '', deleted_email = NULL,"
        " anonymized_at = now(), updated_at = now() WHERE id = ANY(%(ids)s)",
        ids,
    )
    for table in (
        "notifications",
        "notification_preferences",
        "notification_frequencies",
        "sessions",
    ):
        await conn.execute(f"DELETE FROM {table} WHERE user_id = ANY(%(ids)s)", ids)


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


async def drop_password_set_since(conn: Conn, *, user_id: uuid.UUID, since: dt.datetime) -> bool:
    """Remove the password when it was set or changed at or after `since`."""
    return bool(
        await conn.fetch_val(
            "DELETE FROM user_passwords WHERE user_id = %(u)s AND updated_at >= %(t)s"
            " RETURNING true",
            {"u": user_id, "t": since},
        )
    )


async def drop_password(conn: Conn, user_id: uuid.UUID) -> bool:
    return bool(
        await conn.fetch_val(
            "DELETE FROM user_passwords WHERE user_id = %(u)s RETURNING true", {"u": user_id}
        )
    )


async def untombstone_user(conn: Conn, user_id: uuid.UUID) -> bool:
    """A deleted, not yet anonymised user back at its kept address (unless it was taken)."""
    return bool(
        await conn.fetch_val(
            "UPDATE users u SET email = u.deleted_email, deleted_email = NULL, deleted_at = NULL,"
            " updated_at = now() WHERE u.id = %(u)s AND u.deleted_at IS NOT NULL"
            " AND u.anonymized_at IS NULL AND u.deleted_email IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM users o WHERE lower(o.email) = lower(u.deleted_email))"
            " RETURNING true",
            {"u": user_id},
        )
    )


async def unrevoke_owner_memberships(
    conn: Conn, *, user_id: uuid.UUID, account_ids: list[uuid.UUID]
) -> None:
    """The owner memberships of the accounts a user deletion soft-deleted, active again."""
    await conn.execute(
        "UPDATE memberships SET revoked_at = NULL, updated_at = now() WHERE user_id = %(u)s"
        " AND role = 'owner' AND account_id = ANY(%(a)s) AND revoked_at IS NOT NULL",
        {"u": user_id, "a": account_ids},
    )
