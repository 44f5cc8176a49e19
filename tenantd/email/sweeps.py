"""Sweeps of the email domain."""

from __future__ import annotations

from datetime import timedelta

from tenantd.email import queries
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep

# A mail job is retried for hours at most; a sent-marker older than this guards nothing.
SENDS_RETENTION = timedelta(days=7)


@sweep("email_sends", "Delete email sent-markers older than 7 days")
async def email_sends_sweep(ctx: SweepContext) -> None:
    """Hourly; a marker is only read by a run of its own job, long finished by then."""
    await delete_batches(ctx, *queries.sends_older_than(SENDS_RETENTION))


SWEEPS = (email_sends_sweep,)
