"""Sweeps: named periodic clean-ups (each domain lists its own) and the runner that gives
them their guarantees.

- Single runner: each run holds `pg_try_advisory_lock` on a dedicated connection, so with N
  instances (or a cron `tenantd sweep` next to them) one runs it and the others skip.
- Once per interval: the scheduler's runs record their start in `sweep_runs` under that lock
  and skip when the last start is younger than the interval, so N schedulers run a daily
  sweep once a day, not N times.
- Bounded work: `delete_batches` touches at most `batch_size` rows per statement, each
  statement its own short transaction, so a sweep over a million rows never holds long locks
  or builds a huge transaction; between batches it honours a stop request. Every batch loop
  (a statement, or a transaction that also audits) runs on `in_batches`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Table
from sqlalchemy.sql import ColumnElement

from tenantd.db import Database
from tenantd.db.core import Conn
from tenantd.ops import queries
from tenantd.settings import Settings

log = logging.getLogger(__name__)

# Advisory locks of sweeps use the two-int form: (this class, crc32 of the sweep name).
# Distinct from the migration lock, which uses the one-bigint form.
LOCK_CLASS = 735_412

BatchCallback = Callable[[str, str, int], None]  # (sweep, table, rows in this batch)


class SweepHost(Protocol):
    """What a sweep needs of the services bundle."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...


class SweepStopping(Exception):
    """Raised between batches when the process is shutting down."""


@dataclass
class SweepContext:
    """What a sweep function gets: the services, the batching knobs and a progress sink."""

    services: SweepHost
    sweep: str
    dry_run: bool = False
    batch_size: int = 1000
    batch_pause: float = 0.0
    stopping: asyncio.Event | None = None
    on_batch: BatchCallback | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def db(self) -> Database:
        return self.services.db

    @property
    def settings(self) -> Settings:
        return self.services.settings

    def report(self, table: str, rows: int) -> None:
        """Count rows of `table` deleted (or, in a dry run, that would be)."""
        self.counts[table] = self.counts.get(table, 0) + rows
        if self.on_batch is not None:
            self.on_batch(self.sweep, table, rows)

    def check_stopping(self) -> None:
        if self.stopping is not None and self.stopping.is_set():
            raise SweepStopping()

    async def pause(self) -> None:
        if self.batch_pause > 0:
            await asyncio.sleep(self.batch_pause)


SweepFn = Callable[[SweepContext], Awaitable[Mapping[str, int] | None]]


@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    run: SweepFn


@dataclass
class SweepOutcome:
    name: str
    status: str  # ok | failed | interrupted | locked | not_due | dry_run
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        return self.status in {"ok", "failed", "interrupted", "dry_run"}

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def lock_key(name: str) -> int:
    """The int4 advisory-lock key of a sweep (stable across processes and versions)."""
    value = zlib.crc32(name.encode())
    return value - (1 << 32) if value >= (1 << 31) else value


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- batching helpers -------------------------------------------------------------------


async def in_batches(
    step: Callable[[], Awaitable[int]], batch_size: int, ctx: SweepContext | None = None
) -> int:
    """Run `step` until one handles fewer than `batch_size` rows; return how many in all.

    `step` is one short statement or transaction over at most `batch_size` rows that returns
    how many it handled (deleted, revoked, ...). With a sweep context, each step first honours
    a stop request, and the context's pause is kept between steps.
    """
    total = 0
    while True:
        if ctx is not None:
            ctx.check_stopping()
        handled = await step()
        total += handled
        if handled < batch_size:
            return total
        if ctx is not None:
            await ctx.pause()


async def batched_run(
    db: Database,
    *,
    batch_size: int,
    dry_run: bool,
    count: Callable[[Conn], Awaitable[int]],
    step: Callable[[Conn], Awaitable[int]],
    done: str,
) -> int:
    """A batched change outside a sweep context (its function is also called directly): a dry
    run only counts the candidates; otherwise `step` handles one batch in its own transaction
    until a batch comes back short, and the total is logged as `done`."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if dry_run:
        async with db.connection() as conn:
            return await count(conn)

    async def one_batch() -> int:
        async with db.transaction() as conn:
            return await step(conn)

    total = await in_batches(one_batch, batch_size)
    if total:
        log.info(done, extra={"count": total})
    return total


async def delete_batches(ctx: SweepContext, table: Table, where: ColumnElement[bool]) -> int:
    """DELETE FROM `table` WHERE `where`, at most batch_size rows per statement.

    `where` is a Core expression over `table` (values in it are bound parameters).
    A dry run counts the matching rows instead and changes nothing.
    """
    if ctx.dry_run:
        count = int(await ctx.db.fetch_val(queries.count_rows(table, where)))
        ctx.report(table.name, count)
        return count
    stmt = queries.delete_batch(table, where, ctx.batch_size)

    async def batch() -> int:
        rows = await ctx.db.execute(stmt)  # autocommit: each batch its own transaction
        if rows:
            ctx.report(table.name, rows)
        return rows

    return await in_batches(batch, ctx.batch_size, ctx)


def sweep(name: str, description: str) -> Callable[[SweepFn], Sweep]:
    """Decorator: `fn(ctx)` becomes the sweep `name` (a domain lists it in its SWEEPS)."""

    def decorate(fn: SweepFn) -> Sweep:
        return Sweep(name=name, description=description, run=fn)

    return decorate


def combined(name: str, description: str, *parts: SweepFn) -> Sweep:
    """One sweep `name` made of several domains' parts, run in order under its one lock."""

    async def run(ctx: SweepContext) -> None:
        for part in parts:
            await part(ctx)

    return Sweep(name=name, description=description, run=run)


# --- runner -----------------------------------------------------------------------------


async def run_sweep(
    services: SweepHost,
    sweep: Sweep,
    *,
    dry_run: bool = False,
    interval: float | None = None,
    batch_size: int = 1000,
    batch_pause: float = 0.0,
    stopping: asyncio.Event | None = None,
    on_batch: BatchCallback | None = None,
    instance: str | None = None,
) -> SweepOutcome:
    """Run one sweep if no other process is running it (and, with `interval`, only when
    the last recorded start is older than that many seconds)."""
    started = time.perf_counter()
    key = lock_key(sweep.name)
    ctx = SweepContext(
        services=services,
        sweep=sweep.name,
        dry_run=dry_run,
        batch_size=batch_size,
        batch_pause=batch_pause,
        stopping=stopping,
        on_batch=on_batch,
    )
    # db.connection(): a lost connection surfaces as DatabaseUnavailable (one warning line
    # from the scheduler during an outage, not a traceback).
    async with services.db.connection() as lock_conn:
        try:
            got = await lock_conn.fetch_val(queries.TRY_LOCK, {"c": LOCK_CLASS, "k": key})
            if not got:
                log.info("sweep %s is running elsewhere; skipped", sweep.name)
                return SweepOutcome(sweep.name, "locked")
            try:
                return await _run_locked(
                    lock_conn,
                    sweep,
                    ctx,
                    interval=interval,
                    instance=instance or instance_name(),
                    started=started,
                )
            finally:
                await lock_conn.execute(queries.UNLOCK, {"c": LOCK_CLASS, "k": key})
        except BaseException:
            # A connection whose unlock may not have run must not go back to the pool
            # still holding the session lock: closing it releases the lock.
            lock_conn.raw.close()
            raise


async def _run_locked(
    lock_conn: Conn,
    sweep: Sweep,
    ctx: SweepContext,
    *,
    interval: float | None,
    instance: str,
    started: float,
) -> SweepOutcome:
    dry_run = ctx.dry_run
    if not dry_run:
        run_count = await lock_conn.fetch_val(
            queries.START_RUN, {"name": sweep.name, "instance": instance, "interval": interval}
        )
        if run_count is None:
            return SweepOutcome(sweep.name, "not_due")
    status, error = ("dry_run" if dry_run else "ok"), None
    try:
        returned = await sweep.run(ctx)
        for table, rows in (returned or {}).items():
            # Functions that count for themselves return their totals.
            if table not in ctx.counts:
                ctx.report(table, int(rows))
    except SweepStopping:
        status = "interrupted"
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"[:500]
        log.exception("sweep %s failed", sweep.name)
    outcome = SweepOutcome(
        sweep.name, status, dict(ctx.counts), error, time.perf_counter() - started
    )
    if not dry_run:
        await lock_conn.execute(
            queries.FINISH_RUN,
            {"name": sweep.name, "status": status, "counts": outcome.counts, "error": error},
        )
    log.info(
        "sweep %s %s",
        sweep.name,
        status,
        extra={"sweep": {"name": sweep.name, "counts": outcome.counts, "seconds": outcome.seconds}},
    )
    return outcome
