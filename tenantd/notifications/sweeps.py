"""Clean-up functions of the notifications domain (scheduled by the ops sweeps)."""

from __future__ import annotations

from tenantd.db import Database


async def cleanup_dedup(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete expired dedup records (hourly); return how many (or would be, in a dry run).

    Each batch is its own short statement; safe to run twice at once (rows are only deleted
    once, and a key reused meanwhile has a future expiry, so it no longer matches).
    """
    if dry_run:
        count: int = await db.fetch_val(
            "SELECT count(*) FROM notification_dedup WHERE expires_at < now()"
        )
        return count
    total = 0
    while True:
        deleted = await db.execute(
            "DELETE FROM notification_dedup WHERE dedup_key IN ("
            " SELECT dedup_key FROM notification_dedup WHERE expires_at < now()"
            " LIMIT %(batch)s FOR UPDATE SKIP LOCKED) AND expires_at < now()",
            {"batch": batch_size},
        )
        total += deleted
        if deleted < batch_size:
            return total
