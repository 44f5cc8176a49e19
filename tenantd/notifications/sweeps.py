"""Sweeps of the notifications domain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenantd.db import Database
from tenantd.notifications import queries
from tenantd.ops.sweeps import Sweep, SweepContext, in_batches, sweep


async def _delete_expired(
    db: Database, kind: queries.Expiring, *, dry_run: bool, batch_size: int
) -> int:
    """Delete in short statements of `batch_size` rows; return how many (or would be)."""
    async with db.connection() as conn:
        if dry_run:
            return await queries.count_expired(conn, kind)
        return await in_batches(
            lambda: queries.delete_expired(conn, kind, batch_size=batch_size), batch_size
        )


async def cleanup_dedup(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete expired dedup records (hourly); return how many (or would be, in a dry run).

    Each batch is its own short statement; safe to run twice at once (rows are only deleted
    once, and a key reused meanwhile has a future expiry, so it no longer matches).
    """
    return await _delete_expired(db, queries.EXPIRED_DEDUP, dry_run=dry_run, batch_size=batch_size)


async def cleanup_throttles(db: Database, *, dry_run: bool = False, batch_size: int = 1000) -> int:
    """Delete throttle counters whose window ended; return how many (or would be).

    Batched like the dedup cleanup; a key counted again meanwhile started a new window (a
    future expiry), so it no longer matches and keeps its count."""
    kind = queries.EXPIRED_THROTTLES
    return await _delete_expired(db, kind, dry_run=dry_run, batch_size=batch_size)


def _cleanup_sweep(
    name: str, description: str, table: str, cleanup: Callable[..., Awaitable[int]]
) -> Sweep:
    @sweep(name, description)
    async def run(ctx: SweepContext) -> None:
        ctx.check_stopping()
        ctx.report(table, await cleanup(ctx.db, dry_run=ctx.dry_run, batch_size=ctx.batch_size))

    return run


dedup_sweep = _cleanup_sweep(
    "dedup", "Delete expired notification dedup records", "notification_dedup", cleanup_dedup
)
throttles_sweep = _cleanup_sweep(
    "throttles",
    "Delete notification throttle counters whose window ended",
    "notification_throttles",
    cleanup_throttles,
)

SWEEPS = (dedup_sweep, throttles_sweep)
