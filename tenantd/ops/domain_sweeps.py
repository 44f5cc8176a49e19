"""Adapters: the domains' sweep functions registered under their sweep names.

Each domain keeps its own rules (what is expired, what an account purge cascades to, the
audit rows); the adapter passes the batching knobs and reports the counts.
"""

from __future__ import annotations

from tenantd.ops.config import ops_config
from tenantd.ops.sweeps import SweepContext, register_sweep


@register_sweep("invitations", "Soft-revoke pending invitations past their time to live")
async def sweep_invitations(ctx: SweepContext) -> None:
    from tenantd.accounts.sweeps import expire_invitations

    ctx.check_stopping()
    count = await expire_invitations(ctx.db, batch_size=ctx.batch_size, dry_run=ctx.dry_run)
    ctx.report("invitations", count)


@register_sweep("accounts", "Hard-delete accounts soft-deleted more than 30 days ago")
async def sweep_accounts(ctx: SweepContext) -> None:
    from tenantd.accounts.sweeps import purge_deleted_accounts

    ctx.check_stopping()
    # Accounts cascade to every account-scoped row: keep those transactions small.
    batch = max(1, min(ctx.batch_size, 100))
    count = await purge_deleted_accounts(ctx.db, batch_size=batch, dry_run=ctx.dry_run)
    ctx.report("accounts", count)


@register_sweep("dedup", "Delete expired notification dedup records")
async def sweep_dedup(ctx: SweepContext) -> None:
    from tenantd.notifications.sweeps import cleanup_dedup

    ctx.check_stopping()
    count = await cleanup_dedup(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size)
    ctx.report("notification_dedup", count)


@register_sweep("jobs", "Delete done and failed jobs past TENANTD_JOBS_RETENTION_DAYS")
async def sweep_jobs(ctx: SweepContext) -> None:
    from tenantd.jobs.sweeps import cleanup_finished_jobs

    ctx.check_stopping()
    days = ops_config(ctx.settings).jobs_retention_days
    count = await cleanup_finished_jobs(
        ctx.db, older_than_seconds=days * 86_400, dry_run=ctx.dry_run, batch_size=ctx.batch_size
    )
    ctx.report("jobs", count)
