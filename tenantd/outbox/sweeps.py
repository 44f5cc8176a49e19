"""The retention sweep of the outbox: events older than TENANTD_EVENTS_RETENTION_DAYS go."""

from __future__ import annotations

from tenantd.ops.sweeps import SweepContext, delete_batches, sweep
from tenantd.outbox import queries
from tenantd.outbox.settings import OutboxSettings


@sweep("events", "Delete outbox events older than TENANTD_EVENTS_RETENTION_DAYS")
async def events_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    await delete_batches(
        ctx, *queries.older_than(ctx.settings.section(OutboxSettings).events_retention_days)
    )


SWEEPS = (events_sweep,)
