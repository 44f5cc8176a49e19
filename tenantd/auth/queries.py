"""Queries of the auth domain's own answers; each takes the connection it is given.

The tables of users, sessions and tokens are identity's: their queries live in
tenantd/identity/queries.py.
"""

from __future__ import annotations

import uuid

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared

# One round trip: user, providers, memberships and the active account's plan and overrides.
ME = Prepared(
    "tenantd_me",
    """
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at,
       (p.user_id IS NOT NULL) AS has_password,
       p.created_at AS password_created_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', i.provider,
                                                    'createdAt', i.created_at)
                                  ORDER BY i.created_at)
                   FROM user_identities i WHERE i.user_id = u.id), '[]') AS identities,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('accountId', m.account_id,
                                                    'accountName', a.name,
                                                    'role', m.role,
                                                    'createdAt', m.created_at)
                                  ORDER BY m.created_at, m.account_id)
                   FROM memberships m JOIN accounts a ON a.id = m.account_id
                  WHERE m.user_id = u.id AND m.revoked_at IS NULL AND a.deleted_at IS NULL),
                '[]') AS memberships,
       (SELECT pl.features FROM account_plans ap JOIN plans pl ON pl.code = ap.plan_code
         WHERE ap.account_id = %(aid)s) AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(aid)s),
                '{}') AS overrides
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


async def cancel_open_email_changes(conn: Conn, *, user_id: uuid.UUID) -> None:
    await conn.execute(
        "UPDATE email_changes SET cancelled_at = now() WHERE user_id = %(u)s"
        " AND confirmed_at IS NULL AND cancelled_at IS NULL",
        {"u": user_id},
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
