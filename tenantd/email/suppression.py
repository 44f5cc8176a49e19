"""The local email blocklist: queries and rules (insert is a no-op when a row exists)."""

from __future__ import annotations

from typing import Any

from tenantd.db import Conn, Row
from tenantd.email.addresses import normalize_email

REASONS = ("manual", "inactive", "hard_bounce", "complaint", "dropped")
PROVIDERS = ("manual", "postmark", "resend", "sendgrid")


async def find(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT email, reason, provider, details, created_at FROM email_suppressions"
        " WHERE email = %(email)s",
        {"email": normalize_email(email)},
    )


async def add(
    conn: Conn,
    email: str,
    *,
    reason: str,
    provider: str,
    details: dict[str, Any] | None = None,
) -> bool:
    """Suppress an address; return False when it already had a row (kept as it was)."""
    inserted = await conn.execute(
        "INSERT INTO email_suppressions (email, reason, provider, details)"
        " VALUES (%(email)s, %(reason)s, %(provider)s, %(details)s)"
        " ON CONFLICT (email) DO NOTHING",
        {
            "email": normalize_email(email),
            "reason": reason,
            "provider": provider,
            "details": details or {},
        },
    )
    return inserted == 1


async def remove(conn: Conn, email: str) -> bool:
    deleted = await conn.execute(
        "DELETE FROM email_suppressions WHERE email = %(email)s",
        {"email": normalize_email(email)},
    )
    return deleted > 0


async def list_rows(
    conn: Conn, *, provider: str | None = None, reason: str | None = None, limit: int = 1000
) -> list[Row]:
    return await conn.fetch_all(
        "SELECT email, reason, provider, created_at FROM email_suppressions"
        " WHERE (%(provider)s::text IS NULL OR provider = %(provider)s)"
        "   AND (%(reason)s::text IS NULL OR reason = %(reason)s)"
        " ORDER BY created_at DESC, email LIMIT %(limit)s",
        {"provider": provider, "reason": reason, "limit": limit},
    )
