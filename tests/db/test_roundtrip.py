"""The statement path of tenantd/db (run_statement, the pool's checkout): what it keeps of
aiopg's behaviour. It drives aiopg's connection internals (its waiter and poll callback) and
pool internals, so the first test pins the aiopg version they were written for."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator

import aiopg
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import pytest

from tenantd.db import Database
from tenantd.db.core import Pool, Prepared, _session, create_database
from tenantd.db.dsn import url_to_dsn
from tests.helpers import eventually

SLEEP = "SELECT pg_sleep(30)"


async def small_db(url: str, *, size: int = 1, bound: float = 30.0) -> Database:
    return await create_database(url_to_dsn(url), minsize=size, maxsize=size, bound=bound)


@pytest.fixture
async def one(migrated: str) -> AsyncIterator[Database]:
    """A database whose pool holds one connection."""
    db = await small_db(migrated)
    try:
        yield db
    finally:
        db.pool.terminate()
        await db.close()


async def sleepers(url: str) -> int:
    """Backends of this database running the test's sleep statement."""
    async with aiopg.connect(url_to_dsn(url), enable_hstore=False) as conn, conn.cursor() as cur:
        await cur.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s AND state = 'active'",
            (SLEEP,),
        )
        row = await cur.fetchone()
    return int(row[0])


async def end_sleepers(url: str) -> None:
    """A closed client's backend sleeps on until the server next talks to it: end it (it
    would hold the test table's locks)."""
    async with aiopg.connect(url_to_dsn(url), enable_hstore=False) as conn, conn.cursor() as cur:
        await cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            (SLEEP,),
        )


def pooled(db: Database) -> list[aiopg.Connection]:
    pool = db.pool
    assert isinstance(pool, Pool)
    return [*pool._free, *pool._used]


def test_written_for_aiopg_1_4() -> None:
    assert aiopg.__version__ == "1.4.0"
    for name in ("_create_waiter", "_ready", "_close", "timeout"):
        assert hasattr(aiopg.Connection, name)
    for name in ("_acquire", "_fill_free_pool", "release"):
        assert hasattr(aiopg.Pool, name)


async def test_statements_share_one_cursor_and_read_their_own_results(one: Database) -> None:
    stmt = Prepared("test_roundtrip_plus", "SELECT %(n)s::int + 1 AS m")
    async with one.connection() as conn:
        assert await conn.fetch_all("SELECT 1 AS a UNION ALL SELECT 2") == [{"a": 1}, {"a": 2}]
        assert await conn.fetch_one("SELECT 1 AS a WHERE false") is None
        assert await conn.fetch_val(stmt, {"n": 41}) == 42
        assert await conn.fetch_one(stmt, {"n": 1}) == {"m": 2}
        assert await conn.execute("SELECT generate_series(1, 3)") == 3
        session = _session(conn.raw)
        assert "test_roundtrip_plus" in session.prepared
        cursor = session.cursor
    async with one.connection() as conn:
        assert await conn.fetch_val(stmt, {"n": 1}) == 2
        assert _session(conn.raw).cursor is cursor


async def test_errors_are_psycopg2s_and_the_connection_goes_on(one: Database) -> None:
    await one.execute("CREATE TEMP TABLE t (id int PRIMARY KEY)")
    await one.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(psycopg2.errors.UniqueViolation):
        await one.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(psycopg2.errors.SyntaxError):
        await one.fetch_val(Prepared("test_roundtrip_bad", "SELEC 1"))
    with pytest.raises(psycopg2.errors.UniqueViolation):
        async with one.transaction() as conn:
            await conn.execute("INSERT INTO t VALUES (2)")
            await conn.execute("INSERT INTO t VALUES (1)")
    assert await one.fetch_val("SELECT array_agg(id) FROM t") == [1]  # 2 rolled back
    (raw,) = pooled(one)
    assert raw.raw.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE


async def test_a_cancelled_statement_does_not_go_back_to_the_pool(
    one: Database, migrated: str
) -> None:
    (first,) = pooled(one)
    task = asyncio.create_task(one.fetch_val(SLEEP))
    await eventually(lambda: sleepers(migrated))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert first.closed  # closed, not returned mid-statement
    assert first not in pooled(one)
    # The pool opens another connection; it is idle and answers at once.
    assert await asyncio.wait_for(one.fetch_val("SELECT 1"), 10) == 1
    (second,) = pooled(one)
    assert second is not first and not second.closed and not second.isexecuting()
    await end_sleepers(migrated)


async def test_a_cancelled_transaction_commits_nothing(one: Database, migrated: str) -> None:
    await one.execute("CREATE TABLE IF NOT EXISTS test_roundtrip_rows (id int)")
    try:

        async def write_then_wait() -> None:
            async with one.transaction() as conn:
                await conn.execute("INSERT INTO test_roundtrip_rows VALUES (1)")
                await conn.execute(SLEEP)

        task = asyncio.create_task(write_then_wait())
        await eventually(lambda: sleepers(migrated))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await one.fetch_val("SELECT count(*) FROM test_roundtrip_rows") == 0
        assert all(not raw.closed and not raw.isexecuting() for raw in pooled(one))
    finally:
        await end_sleepers(migrated)
        await one.execute("DROP TABLE test_roundtrip_rows")


async def test_a_statement_past_the_pools_bound_fails_and_closes_its_connection(
    migrated: str,
) -> None:
    db = await small_db(migrated, bound=0.5)
    try:
        (first,) = pooled(db)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(db.fetch_val(SLEEP), 20)
        assert first.closed
        assert await db.fetch_val("SELECT 1") == 1
        await end_sleepers(migrated)
    finally:
        db.pool.terminate()
        await db.close()


async def test_callers_queue_for_a_full_pool_in_order(one: Database) -> None:
    order: list[int] = []

    async def statement(n: int) -> None:
        async with one.connection() as conn:
            order.append(n)
            await conn.fetch_val("SELECT 1")

    async with one.connection() as held:
        tasks = [asyncio.create_task(statement(n)) for n in range(5)]
        await eventually(lambda: len(one.pool._queued) == 5)  # type: ignore[attr-defined]
        await held.fetch_val("SELECT 1")
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert order == [0, 1, 2, 3, 4]
    assert one.pool.size == 1 and one.pool.freesize == 1


async def test_a_queued_caller_gives_up_at_the_pools_bound_and_cancelling_one_loses_nothing(
    migrated: str,
) -> None:
    db = await small_db(migrated, bound=0.3)
    try:
        async with db.connection():
            with pytest.raises(TimeoutError):
                await db.fetch_val("SELECT 1")
            waiting = asyncio.create_task(db.fetch_val("SELECT 1"))
            await eventually(lambda: len(db.pool._queued) == 1)  # type: ignore[attr-defined]
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert db.pool.freesize == 1
        assert await db.fetch_val("SELECT 2") == 2
    finally:
        await db.close()


async def test_a_plain_aiopg_pool_still_works(migrated: str) -> None:
    pool = await aiopg.create_pool(url_to_dsn(migrated), minsize=1, maxsize=1, enable_hstore=False)
    db = Database(pool)
    try:
        async with db.transaction() as conn:
            assert await conn.fetch_val("SELECT 1") == 1
        assert pool.freesize == 1
    finally:
        await db.close()


async def test_a_server_side_cancel_is_raised_as_aiopg_raises_it(one: Database) -> None:
    """statement_timeout ends a statement with QueryCanceledError; aiopg turns that into
    CancelledError (after reporting it to the loop's exception handler). tenantd's path
    keeps that, and the connection stays usable."""
    loop = asyncio.get_running_loop()
    reported: list[object] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
    try:
        async with one.connection() as conn:
            await conn.execute("SET statement_timeout = 50")
            async with conn.raw.cursor() as cur:
                with pytest.raises(asyncio.CancelledError):
                    await cur.execute("SELECT pg_sleep(5)")  # aiopg's own cursor
            with pytest.raises(asyncio.CancelledError):
                await conn.fetch_val("SELECT pg_sleep(5)")
            await conn.execute("RESET statement_timeout")
            assert await conn.fetch_val("SELECT 1") == 1
    finally:
        loop.set_exception_handler(previous)
    assert [type(error) for error in reported] == [psycopg2.errors.QueryCanceled] * 2


async def test_every_caller_of_a_busy_pool_is_served(migrated: str) -> None:
    """Callers through `connection()` and aiopg's `pool.acquire()` (as sweeps use it) share a
    full pool, one of its connections is dropped on the way, and every one is served well
    within the pool's bound (a caller once waited out that bound behind another queue)."""
    db = await small_db(migrated, size=2, bound=20.0)
    pool = db.pool
    assert isinstance(pool, Pool)
    served = 0

    async def through_connection() -> None:
        nonlocal served
        async with db.connection() as conn:
            await conn.fetch_val("SELECT 1")
        served += 1

    async def through_acquire() -> None:
        nonlocal served
        async with pool.acquire() as raw, raw.cursor() as cur:
            await cur.execute("SELECT 1")
        served += 1

    async def dropped() -> None:
        nonlocal served
        async with db.connection() as conn:
            conn.raw.close()  # gone: a queued caller opens another in its place
        served += 1

    try:
        calls = [through_connection, through_acquire] * 100 + [dropped] * 3
        await asyncio.wait_for(asyncio.gather(*(call() for call in calls)), 15)
        assert served == len(calls)
        assert pool.size <= 2 and not pool._queued
        assert all(not raw.closed for raw in pool._free)
    finally:
        await db.close()


def test_the_statement_bound_keeps_no_event_loop_alive(migrated: str) -> None:
    """The watchdog registry is keyed weakly by loop: a finished loop (one per test, one per
    `asyncio.run`) is freed, armed timer and all."""
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def statement() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        db = await small_db(migrated)
        try:
            assert await db.fetch_val("SELECT 1") == 1
        finally:
            await db.close()

    for _ in range(3):
        asyncio.run(statement())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
