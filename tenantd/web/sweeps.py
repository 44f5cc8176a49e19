"""Sweeps of the web package: the answers kept for Idempotency-Key."""

from __future__ import annotations

from tenantd.ops.sweeps import SweepContext, delete_batches, sweep
from tenantd.web import queries
from tenantd.web.idempotency import TTL_SECONDS


@sweep("idempotency", "Delete Idempotency-Key answers older than 24 hours")
async def idempotency_sweep(ctx: SweepContext) -> None:
    """Hourly; a row past its 24 hours is no longer answered from anyway (claim takes it
    over), so deleting it twice or late changes nothing."""
    await delete_batches(ctx, *queries.idempotency_keys_older_than(TTL_SECONDS))


SWEEPS = (idempotency_sweep,)
