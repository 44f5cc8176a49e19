"""Sweeps of the notifications domain."""

from __future__ import annotations

from tenantd.db import Database
from tenantd.notifications import queries
from tenantd.ops.sweeps import SweepContext, sweep


async def cleanup_dedup(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete expired dedup records (hourly); return how many (or would be, in a dry run).

    Each batch is its own short statement; safe to run twice at once (rows are only deleted
    once, and a key reused meanwhile has a future expiry, so it no longer matches).
    """
    async with db.connection() as conn:
        if dry_run:
            return await queries.count_expired_dedup(conn)
        total = 0
        while True:
            deleted = await queries.delete_expired_dedup(conn, batch_size=batch_size)
            total += deleted
            if deleted < batch_size:
                return total


@sweep("dedup", "Delete expired notification dedup records")
async def dedup_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await cleanup_dedup(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size)
    ctx.report("notification_dedup", count)


async def cleanup_throttles(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete throttle counters whose window ended; return how many (or would be).

    Batched like the dedup cleanup; a key counted again meanwhile started a new window (a
    future expiry), so it no longer matches and keeps its count."""
    async with db.connection() as conn:
        if dry_run:
            return await queries.count_expired_throttles(conn)
        total = 0
        while True:
            deleted = await queries.delete_expired_throttles(conn, batch_size=batch_size)
            total += deleted
            if deleted < batch_size:
                return total


@sweep("throttles", "Delete notification throttle counters whose window ended")
async def throttles_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await cleanup_throttles(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size)
    ctx.report("notification_throttles", count)


SWEEPS = (dedup_sweep, throttles_sweep)
