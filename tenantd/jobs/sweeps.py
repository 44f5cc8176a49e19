"""The sweep of the job table."""

from __future__ import annotations

from tenantd.db import Database
from tenantd.jobs import queries
from tenantd.ops.config import SchedulerSettings
from tenantd.ops.sweeps import SweepContext, in_batches, sweep

FINISHED_RETENTION_SECONDS = 7 * 24 * 3600


async def cleanup_finished_jobs(
    db: Database,
    *,
    older_than_seconds: float = FINISHED_RETENTION_SECONDS,
    dry_run: bool = False,
    batch_size: int = 1000,
) -> int:
    """Delete done and failed jobs finished longer ago than `older_than_seconds`."""
    where = queries.finished_before(older_than_seconds)
    if dry_run:
        count: int = await db.fetch_val(queries.count_jobs(where))
        return count
    stmt = queries.delete_jobs_batch(where, batch_size)
    return await in_batches(lambda: db.execute(stmt), batch_size)


@sweep("jobs", "Delete done and failed jobs past TENANTD_JOBS_RETENTION_DAYS")
async def jobs_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    days = ctx.settings.section(SchedulerSettings).jobs_retention_days
    count = await cleanup_finished_jobs(
        ctx.db, older_than_seconds=days * 86_400, dry_run=ctx.dry_run, batch_size=ctx.batch_size
    )
    ctx.report("jobs", count)


SWEEPS = (jobs_sweep,)
