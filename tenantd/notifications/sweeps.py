"""Sweeps of the notifications domain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenantd.db import Conn, Database
from tenantd.notifications import queries
from tenantd.ops.sweeps import SweepContext, in_batches, sweep

Count = Callable[[Conn], Awaitable[int]]
DeleteBatch = Callable[..., Awaitable[int]]


async def _delete_in_batches(
    db: Database, count: Count, delete: DeleteBatch, *, dry_run: bool, batch_size: int
) -> int:
    """Delete in short statements of `batch_size` rows; return how many (or would be)."""
    async with db.connection() as conn:
        if dry_run:
            return await count(conn)
        return await in_batches(lambda: delete(conn, batch_size=batch_size), batch_size)


async def cleanup_dedup(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete expired dedup records (hourly); return how many (or would be, in a dry run).

    Each batch is its own short statement; safe to run twice at once (rows are only deleted
    once, and a key reused meanwhile has a future expiry, so it no longer matches).
    """
    return await _delete_in_batches(
        db,
        queries.count_expired_dedup,
        queries.delete_expired_dedup,
        dry_run=dry_run,
        batch_size=batch_size,
    )


@sweep("dedup", "Delete expired notification dedup records")
async def dedup_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await cleanup_dedup(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size)
    ctx.report("notification_dedup", count)


async def cleanup_throttles(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete throttle counters whose window ended; return how many (or would be).

    Batched like the dedup cleanup; a key counted again meanwhile started a new window (a
    future expiry), so it no longer matches and keeps its count."""
    return await _delete_in_batches(
        db,
        queries.count_expired_throttles,
        queries.delete_expired_throttles,
        dry_run=dry_run,
        batch_size=batch_size,
    )


@sweep("throttles", "Delete notification throttle counters whose window ended")
async def throttles_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await cleanup_throttles(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size)
    ctx.report("notification_throttles", count)


SWEEPS = (dedup_sweep, throttles_sweep)
