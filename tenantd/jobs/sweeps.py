"""Clean-up of the job table (scheduled by the ops sweeps)."""

from __future__ import annotations

from tenantd.db import Database

FINISHED_RETENTION_SECONDS = 7 * 24 * 3600


async def cleanup_finished_jobs(
    db: Database,
    *,
    older_than_seconds: float = FINISHED_RETENTION_SECONDS,
    dry_run: bool = False,
    batch_size: int = 1000,
) -> int:
    """Delete done and failed jobs finished longer ago than `older_than_seconds`."""
    params = {"age": older_than_seconds, "batch": batch_size}
    where = "status IN ('done', 'failed') AND finished_at < now() - make_interval(secs => %(age)s)"
    if dry_run:
        count: int = await db.fetch_val(f"SELECT count(*) FROM jobs WHERE {where}", params)
        return count
    total = 0
    while True:
        deleted = await db.execute(
            f"DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE {where}"
            " LIMIT %(batch)s FOR UPDATE SKIP LOCKED)",
            params,
        )
        total += deleted
        if deleted < batch_size:
            return total
