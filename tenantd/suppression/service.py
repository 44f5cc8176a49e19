"""The local email blocklist: queries and rules (insert is a no-op when a row exists)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from tenantd.addresses import normalize_email
from tenantd.db import Conn, Row
from tenantd.outbox import Actor, Event, emit, emit_many
from tenantd.suppression import queries

REASONS = ("manual", "inactive", "hard_bounce", "complaint", "dropped")
PROVIDERS = ("manual", "postmark", "resend", "sendgrid", "smtp", "ses")
SYSTEM = Actor.system("email")


def _subject(email: str) -> str:
    return f"email:{email}"


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
    actor: Actor = SYSTEM,
) -> bool:
    """Suppress an address; return False when it already had a row (kept as it was)."""
    address = normalize_email(email)
    async with conn.transaction():
        inserted = await conn.execute(
            queries.SUPPRESSION_ADD,
            {"email": address, "reason": reason, "provider": provider, "details": details or {}},
        )
        if inserted == 1:
            await emit(
                conn,
                "email.suppressed",
                account_id=None,
                actor=actor,
                data={"email": address, "reason": reason, "provider": provider},
                subject=_subject(address),
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
    if not first:
        return []
    # Sorted, so concurrent batches lock the same keys in the same order (no deadlock).
    batch = [
        {"email": email, "reason": reason, "details": detail}
        for email, (reason, detail) in sorted(first.items())
    ]
    async with conn.transaction():
        answer = await conn.fetch_one(
            queries.SUPPRESSION_ADD_MANY,
            {"provider": provider, "rows": orjson.dumps(batch).decode()},
        )
        emails, reasons = (answer["emails"], answer["reasons"]) if answer else ([], [])
        added: list[Row] = [
            {"email": email, "reason": reason}
            for email, reason in zip(emails, reasons, strict=True)
        ]
        await emit_many(
            conn,
            [
                Event(
                    "email.suppressed",
                    None,
                    SYSTEM,
                    {"email": row["email"], "reason": row["reason"], "provider": provider},
                    subject=_subject(row["email"]),
                )
                for row in added
            ],
        )
    return added


async def remove(conn: Conn, email: str, *, actor: Actor = SYSTEM) -> bool:
    """Delete the address's row (operator delete, verified signup); False when there was none."""
    address = normalize_email(email)
    async with conn.transaction():
        deleted = await conn.execute(queries.SUPPRESSION_REMOVE, {"email": address})
        if deleted:
            await emit(
                conn,
                "email.unsuppressed",
                account_id=None,
                actor=actor,
                data={"email": address},
                subject=_subject(address),
            )
    return deleted > 0


async def list_rows(
    conn: Conn, *, provider: str | None = None, reason: str | None = None, limit: int = 1000
) -> list[Row]:
    return await conn.fetch_all(
        queries.SUPPRESSION_LIST,
        {"provider": provider, "reason": reason, "limit": limit},
    )
