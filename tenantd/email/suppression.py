"""The local email blocklist: queries and rules (insert is a no-op when a row exists)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from tenantd.addresses import normalize_email
from tenantd.db import Conn, Row
from tenantd.email import queries

REASONS = ("manual", "inactive", "hard_bounce", "complaint", "dropped")
PROVIDERS = ("manual", "postmark", "resend", "sendgrid", "smtp", "ses")


async def find(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        queries.SUPPRESSION_FIND,
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
        queries.SUPPRESSION_ADD,
        {
            "email": normalize_email(email),
            "reason": reason,
            "provider": provider,
            "details": details or {},
        },
    )
    return inserted == 1


async def add_many(
    conn: Conn, rows: Iterable[tuple[str, str, dict[str, Any]]], *, provider: str
) -> list[Row]:
    """Suppress many (email, reason, details) in one statement; return the rows inserted.

    Addresses that already have a row keep it (the first verdict wins, also within `rows`).
    """
    first: dict[str, tuple[str, dict[str, Any]]] = {}
    for email, reason, detail in rows:
        first.setdefault(normalize_email(email), (reason, detail))
    # Sorted, so concurrent batches lock the same keys in the same order (no deadlock).
    emails = sorted(first)
    reasons = [first[e][0] for e in emails]
    details = [orjson.dumps(first[e][1]).decode() for e in emails]
    if not emails:
        return []
    return await conn.fetch_all(
        queries.SUPPRESSION_ADD_MANY,
        {"provider": provider, "emails": emails, "reasons": reasons, "details": details},
    )


async def remove(conn: Conn, email: str) -> bool:
    """Delete the address's row (operator delete, verified signup); False when there was none."""
    deleted = await conn.execute(
        queries.SUPPRESSION_REMOVE,
        {"email": normalize_email(email)},
    )
    return deleted > 0


async def list_rows(
    conn: Conn, *, provider: str | None = None, reason: str | None = None, limit: int = 1000
) -> list[Row]:
    return await conn.fetch_all(
        queries.SUPPRESSION_LIST,
        {"provider": provider, "reason": reason, "limit": limit},
    )
