"""Sweeps of the web package: the answers kept for Idempotency-Key."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db.tables import api_idempotency_keys
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep
from tenantd.web.idempotency import TTL_SECONDS


@sweep("idempotency", "Delete Idempotency-Key answers older than 24 hours")
async def idempotency_sweep(ctx: SweepContext) -> None:
    """Hourly; a row past its 24 hours is no longer answered from anyway (claim takes it
    over), so deleting it twice or late changes nothing."""
    cutoff = func.now() - timedelta(seconds=TTL_SECONDS)
    await delete_batches(ctx, api_idempotency_keys, api_idempotency_keys.c.created_at < cutoff)


SWEEPS = (idempotency_sweep,)
