"""Sweeps: one runner among instances, once per interval, bounded batches, dry runs."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from sqlalchemy import func

from tenantd.app.bundle import Domains, open_services
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.db.errors import DatabaseUnavailable
from tenantd.db.tables import revoked_tokens
from tenantd.ops.config import SchedulerSettings
from tenantd.ops.scheduler import SweepScheduler
from tenantd.ops.sweeps import Sweep, SweepContext, delete_batches, run_sweep
from tenantd.settings import Settings, validated
from tests.helpers import eventually


def counting_sweep(name: str, calls: list[str], *, seconds: float = 0.0) -> Sweep:
    async def run(ctx: SweepContext) -> dict[str, int]:
        calls.append(name)
        await asyncio.sleep(seconds)
        return {"things": 1}

    return Sweep(name=name, description="test", run=run)


async def insert_revoked(db: Database, *, expired: int, live: int) -> None:
    await db.execute(
        "INSERT INTO revoked_tokens (jti, user_id, expires_at)"
        " SELECT gen_random_uuid(), gen_random_uuid(), now() - interval '1 hour'"
        " FROM generate_series(1, %(n)s)",
        {"n": expired},
    )
    await db.execute(
        "INSERT INTO revoked_tokens (jti, user_id, expires_at)"
        " SELECT gen_random_uuid(), gen_random_uuid(), now() + interval '1 hour'"
        " FROM generate_series(1, %(n)s)",
        {"n": live},
    )


async def test_two_concurrent_runners_run_a_sweep_once(
    standalone_services: Domains, other_services: Domains, db: Database
) -> None:
    calls: list[str] = []
    release = asyncio.Event()

    async def held(ctx: SweepContext) -> dict[str, int]:
        calls.append("test-single")
        await release.wait()  # runs until the other two attempts have given up
        return {"things": 1}

    sweep = Sweep(name="test-single", description="test", run=held)
    attempts = [
        asyncio.create_task(run_sweep(s, sweep))
        for s in (standalone_services, other_services, standalone_services)
    ]
    await eventually(lambda: asyncio.sleep(0, sum(task.done() for task in attempts) == 2))
    release.set()
    outcomes = await asyncio.gather(*attempts)
    assert calls == ["test-single"]
    assert sorted(o.status for o in outcomes) == ["locked", "locked", "ok"]
    row = await db.fetch_one("SELECT * FROM sweep_runs WHERE name = 'test-single'")
    assert row is not None
    assert row["run_count"] == 1
    assert row["last_status"] == "ok"
    assert row["last_counts"] == {"things": 1}
    # The lock is released afterwards: the next run goes ahead.
    assert (await run_sweep(other_services, sweep)).status == "ok"
    assert len(calls) == 2


async def test_interval_runs_once_per_interval_across_instances(
    standalone_services: Domains, other_services: Domains, db: Database
) -> None:
    calls: list[str] = []
    sweep = counting_sweep("test-interval", calls)
    first = await run_sweep(standalone_services, sweep, interval=3600)
    second = await run_sweep(other_services, sweep, interval=3600)
    assert (first.status, second.status) == ("ok", "not_due")
    assert calls == ["test-interval"]
    # Once the interval has passed it is due again; a forced run (cron) ignores it.
    await db.execute(
        "UPDATE sweep_runs SET last_started_at = now() - interval '2 hours'"
        " WHERE name = 'test-interval'"
    )
    assert (await run_sweep(other_services, sweep, interval=3600)).status == "ok"
    assert (await run_sweep(standalone_services, sweep)).status == "ok"
    assert len(calls) == 3
    assert await db.fetch_val("SELECT run_count FROM sweep_runs WHERE name = 'test-interval'") == 3


async def test_two_schedulers_run_each_sweep_once(
    standalone_services: Domains, other_services: Domains, db: Database
) -> None:
    calls: list[str] = []
    sweeps = [counting_sweep("test-a", calls, seconds=0.05), counting_sweep("test-b", calls)]
    config = validated(SchedulerSettings, {"TENANTD_SCHEDULER_TICK_SECONDS": "0.1"})
    schedulers = [
        SweepScheduler(standalone_services, config, sweeps=sweeps),
        SweepScheduler(other_services, config, sweeps=sweeps),
    ]
    ticks: collections.Counter[tuple[int, str]] = collections.Counter()
    for number, scheduler in enumerate(schedulers):

        async def counted(sweep: Sweep, _tick: Any = scheduler.tick, _n: int = number) -> Any:
            outcome = await _tick(sweep)
            ticks[(_n, sweep.name)] += 1
            return outcome

        scheduler.tick = counted  # type: ignore[method-assign]
        scheduler.start()

    async def ticked_often() -> bool:
        # Wait for events, not for time: both instances tick each sweep several times.
        return len(ticks) == 4 and min(ticks.values()) >= 4

    await eventually(ticked_often)
    for scheduler in schedulers:
        await scheduler.stop()
    assert sorted(calls) == ["test-a", "test-b"]
    rows = await db.fetch_all("SELECT name, run_count FROM sweep_runs ORDER BY name")
    assert rows == [{"name": "test-a", "run_count": 1}, {"name": "test-b", "run_count": 1}]


async def test_deletes_work_in_bounded_batches(standalone_services: Domains, db: Database) -> None:
    await insert_revoked(db, expired=5000, live=7)
    batches: list[tuple[str, int]] = []
    statements: list[int] = []

    async def sweep_fn(ctx: SweepContext) -> None:
        original = ctx.db.execute

        async def counted(stmt: Any, params: Any = None) -> int:
            rows = await original(stmt, params)
            statements.append(rows)
            return rows

        ctx.services.db.execute = counted  # type: ignore[method-assign]
        try:
            await delete_batches(ctx, revoked_tokens, revoked_tokens.c.expires_at < func.now())
        finally:
            del ctx.services.db.execute

    outcome = await run_sweep(
        standalone_services,
        Sweep("test-batches", "", sweep_fn),
        batch_size=500,
        on_batch=lambda sweep, table, rows: batches.append((table, rows)),
    )
    assert outcome.status == "ok"
    assert outcome.counts == {"revoked_tokens": 5000}
    assert batches == [("revoked_tokens", 500)] * 10
    # Each DELETE touched at most one batch; the loop ends on the first short batch.
    assert max(statements) == 500
    assert statements == [500] * 10 + [0]
    assert await db.fetch_val("SELECT count(*) FROM revoked_tokens") == 7


async def test_dry_run_counts_and_deletes_nothing(
    standalone_services: Domains, db: Database
) -> None:
    await insert_revoked(db, expired=1200, live=3)
    sweep = registered_sweeps()["sessions"]
    outcome = await run_sweep(standalone_services, sweep, dry_run=True, batch_size=100)
    assert outcome.status == "dry_run"
    assert outcome.counts["revoked_tokens"] == 1200
    assert await db.fetch_val("SELECT count(*) FROM revoked_tokens") == 1203
    # A dry run is not a run: the interval bookkeeping is untouched.
    assert await db.fetch_val("SELECT count(*) FROM sweep_runs") == 0


async def test_failing_sweep_is_recorded_and_releases_the_lock(
    standalone_services: Domains, db: Database
) -> None:
    async def broken(ctx: SweepContext) -> None:
        raise RuntimeError("boom")

    sweep = Sweep("test-broken", "", broken)
    outcome = await run_sweep(standalone_services, sweep)
    assert outcome.status == "failed"
    assert outcome.error == "RuntimeError: boom"
    row = await db.fetch_one("SELECT last_status, last_error FROM sweep_runs")
    assert row == {"last_status": "failed", "last_error": "RuntimeError: boom"}
    assert (await run_sweep(standalone_services, sweep)).status == "failed"  # not stuck "locked"


async def test_stopping_interrupts_between_batches(
    standalone_services: Domains, db: Database
) -> None:
    await insert_revoked(db, expired=1000, live=0)
    stopping = asyncio.Event()
    seen: list[int] = []

    def on_batch(sweep: str, table: str, rows: int) -> None:
        seen.append(rows)
        if len(seen) == 3:
            stopping.set()

    sweep = Sweep(
        "test-stop",
        "",
        lambda ctx: delete_batches(ctx, revoked_tokens, revoked_tokens.c.expires_at < func.now()),
    )
    outcome = await run_sweep(
        standalone_services, sweep, batch_size=100, stopping=stopping, on_batch=on_batch
    )
    assert outcome.status == "interrupted"
    assert outcome.counts == {"revoked_tokens": 300}
    assert await db.fetch_val("SELECT count(*) FROM revoked_tokens") == 700
    assert await db.fetch_val("SELECT last_status FROM sweep_runs") == "interrupted"


async def test_sweeps_due_together_do_not_starve_a_small_pool(
    settings: Settings, migrated: str, db: Database
) -> None:
    # Each sweep holds a connection for its lock and takes another for its work. All of them
    # due at once (as at start-up) used to take every lock connection first and wait for a
    # work connection that never came free: every sweep failed at the pool's timeout.
    small = settings.replaced(settings.database.model_copy(update={"pool_min": 1, "pool_max": 2}))
    working: list[str] = []

    def working_sweep(name: str) -> Sweep:
        async def run(ctx: SweepContext) -> dict[str, int]:
            working.append(name)
            await asyncio.sleep(0.05)  # long enough for the other ticks to be due meanwhile
            return {"rows": await ctx.services.db.fetch_val("SELECT 1")}

        return Sweep(name=name, description="test", run=run)

    names = [f"test-starve-{n}" for n in range(4)]
    config = validated(SchedulerSettings, {"TENANTD_SCHEDULER_TICK_SECONDS": "0.05"})
    async with open_services(small, migrated) as services:
        scheduler = SweepScheduler(services, config, sweeps=[working_sweep(n) for n in names])
        scheduler.start()

        async def all_ran() -> list[dict[str, Any]]:
            rows = await db.fetch_all(
                "SELECT name, last_status FROM sweep_runs WHERE name LIKE 'test-starve-%%'"
            )
            finished = [r for r in rows if r["last_status"] != "running"]
            return finished if len(finished) == len(names) else []

        try:
            rows = await eventually(all_ran)
        finally:
            await scheduler.stop()
    assert sorted(working) == names
    assert {r["last_status"] for r in rows} == {"ok"}


async def test_a_sweep_whose_lock_connection_is_lost_raises_database_unavailable(
    standalone_services: Domains, db: Database
) -> None:
    """The scheduler logs DatabaseUnavailable as one warning line; a raw psycopg2 error from
    the lock connection would be logged with a traceback (seen after a database restart)."""

    async def lose_lock_connection(ctx: SweepContext) -> dict[str, int]:
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks"
            " WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
        )
        return {"things": 0}

    sweep = Sweep(name="test-lost-lock", description="test", run=lose_lock_connection)
    with pytest.raises(DatabaseUnavailable):
        await run_sweep(standalone_services, sweep)

    # The pool recovers by itself, and the advisory lock went with the closed connection.
    async def ran_again() -> bool:
        try:
            outcome = await run_sweep(standalone_services, counting_sweep("test-lost-lock", []))
        except DatabaseUnavailable:  # the pool's probe has not answered yet
            return False
        return outcome.status == "ok"

    await eventually(ran_again)
