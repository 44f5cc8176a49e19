"""The `throttles` sweep: throttle counters are deleted once their window ended (under the
sweeps' advisory lock, batched, a dry run counts), live windows keep their count."""

from __future__ import annotations

from tenantd.app.bundle import Domains
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.notifications import queries
from tenantd.ops import queries as ops_queries
from tenantd.ops.sweeps import LOCK_CLASS, lock_key, run_sweep


async def count(db: Database, key: str, window_seconds: int) -> int:
    async with db.connection() as conn:
        return await queries.count_throttled(conn, key=key, window_seconds=window_seconds)


async def test_the_sweep_deletes_ended_windows_and_keeps_live_ones(
    standalone_services: Domains, db: Database
) -> None:
    await db.execute(
        "INSERT INTO notification_throttles (throttle_key, window_start, count, expires_at)"
        " SELECT 'old' || g, now() - interval '2 hours', 4, now() - interval '1 hour'"
        " FROM generate_series(1, 30) g"
    )
    assert await count(db, "live", 3600) == 1
    assert await count(db, "live", 3600) == 2
    sweep = registered_sweeps()["throttles"]
    dry = await run_sweep(standalone_services, sweep, dry_run=True)
    assert (dry.status, dry.counts) == ("dry_run", {"notification_throttles": 30})
    outcome = await run_sweep(standalone_services, sweep, batch_size=7)
    assert (outcome.status, outcome.counts) == ("ok", {"notification_throttles": 30})
    assert await db.fetch_val("SELECT throttle_key FROM notification_throttles") == "live"
    # The live window goes on counting; an expired key counts from one again.
    assert await count(db, "live", 3600) == 3
    assert await count(db, "old1", 3600) == 1


async def test_a_window_counts_until_it_ends_then_the_sweep_takes_it(
    standalone_services: Domains, db: Database
) -> None:
    await count(db, "short", 3600)
    expires = await db.fetch_val(
        "SELECT expires_at - window_start FROM notification_throttles WHERE throttle_key = 'short'"
    )
    assert expires.total_seconds() == 3600
    sweep = registered_sweeps()["throttles"]
    assert (await run_sweep(standalone_services, sweep)).counts == {"notification_throttles": 0}
    await db.execute(
        "UPDATE notification_throttles SET window_start = window_start - interval '2 hours',"
        " expires_at = expires_at - interval '2 hours'"
    )
    assert (await run_sweep(standalone_services, sweep)).counts == {"notification_throttles": 1}
    assert await db.fetch_val("SELECT count(*) FROM notification_throttles") == 0


async def test_the_sweep_skips_while_another_process_runs_it(
    standalone_services: Domains, db: Database
) -> None:
    await db.execute(
        "INSERT INTO notification_throttles (throttle_key, window_start, count, expires_at)"
        " VALUES ('old', now() - interval '2 hours', 1, now() - interval '1 hour')"
    )
    sweep = registered_sweeps()["throttles"]
    async with db.connection() as holder:
        assert await holder.fetch_val(
            ops_queries.TRY_LOCK, {"c": LOCK_CLASS, "k": lock_key("throttles")}
        )
        try:
            outcome = await run_sweep(standalone_services, sweep)
        finally:
            await holder.execute(ops_queries.UNLOCK, {"c": LOCK_CLASS, "k": lock_key("throttles")})
    assert outcome.status == "locked"
    assert await db.fetch_val("SELECT count(*) FROM notification_throttles") == 1
