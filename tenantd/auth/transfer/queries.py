"""Queries of `tenantd users import` and `export`; each takes the connection it is given."""

from __future__ import annotations

import uuid

from tenantd.db import Conn, Row
from tenantd.identity import queries as identity_queries


async def lock_email(conn: Conn, email: str) -> None:
    """The address's lock, the one OpenID sign-in takes (transaction-scoped)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('user-email:' || lower(%(e)s), 0))",
        {"e": email},
    )


async def lock_user_by_email(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT id, email_verified_at, deleted_at FROM users"
        " WHERE lower(email) = lower(%(e)s) FOR UPDATE",
        {"e": email},
    )


# Whether a password login exists is identity's question (its user_passwords).
has_password = identity_queries.has_password


INSERT_IDENTITY_SQL = """
WITH inserted AS (
    INSERT INTO user_identities (user_id, provider, subject, email)
    VALUES (%(u)s, %(p)s, %(s)s, %(e)s)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT CASE
    WHEN EXISTS (SELECT 1 FROM inserted) THEN 'inserted'
    WHEN EXISTS (SELECT 1 FROM user_identities
                  WHERE user_id = %(u)s AND provider = %(p)s AND subject = %(s)s) THEN 'present'
    ELSE 'taken'
END
"""


async def insert_identity(
    conn: Conn, *, user_id: uuid.UUID, provider: str, subject: str, email: str
) -> str:
    """inserted | present (this user has it) | taken (another user holds that identity, or
    this user links another one at the provider)."""
    outcome: str = await conn.fetch_val(
        INSERT_IDENTITY_SQL, {"u": user_id, "p": provider, "s": subject, "e": email}
    )
    return outcome


async def export_batch(conn: Conn, *, after: uuid.UUID | None, limit: int) -> list[Row]:
    """Live users after `after` in id order, with their password hash."""
    return await conn.fetch_all(
        "SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at, u.created_at,"
        " p.password_hash FROM users u LEFT JOIN user_passwords p ON p.user_id = u.id"
        " WHERE u.deleted_at IS NULL AND (%(after)s::uuid IS NULL OR u.id > %(after)s)"
        " ORDER BY u.id LIMIT %(limit)s",
        {"after": after, "limit": limit},
    )
