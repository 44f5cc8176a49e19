"""The suppression domain's part of the session sweep."""

from __future__ import annotations

from datetime import timedelta

from tenantd.ops.config import SchedulerSettings
from tenantd.ops.sweeps import SweepContext, delete_batches
from tenantd.suppression import queries


async def old_event_ids(ctx: SweepContext) -> None:
    """Provider event ids older than TENANTD_WEBHOOK_EVENTS_RETENTION_DAYS (providers stop
    retrying, and signatures stop verifying, long before that)."""
    retention = timedelta(
        days=ctx.settings.section(SchedulerSettings).webhook_events_retention_days
    )
    await delete_batches(ctx, *queries.event_ids_older_than(retention))
