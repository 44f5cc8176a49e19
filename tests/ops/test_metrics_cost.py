"""/metrics costs the database nothing per scrape: figures come from one refresh task per
process, row counts are kept on write (sql/0094) and stay exact, a scrape takes no pool
connection (so it answers with the pool exhausted) and 4 x 50 concurrent scrapes leave /healthz
fast. The size of the tables plays no part in a scrape (it runs no statement), so the tests
seed a few thousand rows, not the hundreds of thousands a per-scrape count would need."""

from __future__ import annotations

import asyncio
import http.client
import random
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.db.core import Pool
from tenantd.jobs import queries as jobs
from tenantd.ops.metrics import Metrics, StateSnapshot, fold_counts
from tenantd.suppression import service as suppression
from tests.helpers import SECRET, eventually
from tests.ops.servers import running, server_env, start_server
from tests.ops.test_metrics import Samples, scrape, value

CHANNELS = ("in_app", "email", "sse", "web_push")
DELIVERY_STATUSES = ("pending", "sent", "failed", "suppressed")
JOB_STATUSES = ("queued", "running", "done", "failed")
REASONS = ("hard_bounce", "complaint", "manual")


async def true_counts(db: Database) -> dict[str, dict[Any, float]]:
    """What the figures must be: count(*) over the tables themselves."""
    deliveries = await db.fetch_all(
        "SELECT channel, status, count(*) AS n FROM notification_deliveries GROUP BY 1, 2"
    )
    job_rows = await db.fetch_all("SELECT status, count(*) AS n FROM jobs GROUP BY 1")
    suppressed = await db.fetch_all(
        "SELECT provider, reason, count(*) AS n FROM email_suppressions GROUP BY 1, 2"
    )
    return {
        "deliveries": {(r["channel"], r["status"]): float(r["n"]) for r in deliveries},
        "jobs": {r["status"]: float(r["n"]) for r in job_rows},
        "suppressions": {(r["provider"], r["reason"]): float(r["n"]) for r in suppressed},
    }


def figures(snapshot: StateSnapshot | None) -> dict[str, dict[Any, float]]:
    assert snapshot is not None

    def nonzero(counts: dict[Any, float]) -> dict[Any, float]:
        return {key: n for key, n in counts.items() if n}

    return {
        "deliveries": nonzero(snapshot.counts.get("deliveries", {})),
        "jobs": nonzero(snapshot.jobs),
        "suppressions": nonzero(snapshot.counts.get("suppressions", {})),
    }


async def write_deliveries(db: Database, user_id: uuid.UUID, rng: random.Random) -> None:
    for round_ in range(25):
        async with db.transaction() as conn:
            notification = await conn.fetch_val(
                "INSERT INTO notifications (user_id, event_type, title)"
                " VALUES (%(u)s, 't', 'T') RETURNING id",
                {"u": user_id},
            )
            channels = rng.sample(CHANNELS, rng.randint(1, 4))
            await conn.execute(
                "INSERT INTO notification_deliveries (notification_id, channel, status)"
                " SELECT %(n)s, c, %(s)s FROM unnest(%(c)s::text[]) AS c",
                {"n": notification, "c": channels, "s": rng.choice(DELIVERY_STATUSES)},
            )
        # A status change of many rows in one statement; some keep their status.
        await db.execute(
            "UPDATE notification_deliveries SET status = %(s)s, attempts = attempts + 1"
            " WHERE channel = ANY(%(c)s::text[])",
            {"s": rng.choice(DELIVERY_STATUSES), "c": rng.sample(CHANNELS, 2)},
        )
        if round_ % 5 == 4:  # a notification goes, and its deliveries by cascade
            await db.execute(
                "DELETE FROM notifications WHERE id = (SELECT id FROM notifications"
                " WHERE user_id = %(u)s ORDER BY created_at LIMIT 1)",
                {"u": user_id},
            )
        if round_ % 7 == 6:  # a rolled-back write counts nothing
            with pytest.raises(RuntimeError):
                async with db.transaction() as conn:
                    await conn.execute("DELETE FROM notification_deliveries")
                    raise RuntimeError("roll back")
        await asyncio.sleep(0)


async def write_jobs(db: Database, rng: random.Random) -> None:
    worker = "metrics-test"
    for _ in range(25):
        async with db.connection() as conn:
            for _ in range(rng.randint(1, 6)):
                await jobs.insert_job(conn, kind="t.count", payload={}, max_attempts=3)
            claimed = await jobs.claim_jobs(
                conn, kinds=["t.count"], worker=worker, limit=rng.randint(1, 5), lease_seconds=30
            )
            ids = [row["id"] for row in claimed]
            if ids:
                await jobs.extend_leases(conn, ids=ids, worker=worker, lease_seconds=30)
                await jobs.complete_jobs(conn, ids=ids[::2], worker=worker)
                for job_id in ids[1::2]:
                    await jobs.retry_or_fail_job(
                        conn,
                        job_id=job_id,
                        worker=worker,
                        error="boom",
                        final=rng.random() < 0.5,
                        delay_seconds=0,
                    )
            await conn.execute("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs LIMIT 2)")
        await asyncio.sleep(0)


async def write_suppressions(db: Database, rng: random.Random) -> None:
    for round_ in range(25):
        async with db.connection() as conn:
            batch: list[tuple[str, str, dict[str, Any]]] = [
                (f"r{round_}-{n}@example.com", rng.choice(REASONS), {}) for n in range(3)
            ]
            await suppression.add_many(conn, batch, provider=rng.choice(("resend", "sendgrid")))
            await suppression.add(
                conn, f"m{round_}@example.com", reason="manual", provider="manual"
            )
            await conn.execute(
                "UPDATE email_suppressions SET reason = %(r)s"
                " WHERE email IN (SELECT email FROM email_suppressions ORDER BY random() LIMIT 2)",
                {"r": rng.choice(REASONS)},
            )
            await suppression.remove(conn, f"r{round_}-0@example.com")
        await asyncio.sleep(0)


async def test_counts_are_exact_after_concurrent_writes_and_folds(
    db: Database, factory: Any
) -> None:
    user = await factory.user()
    rng = random.Random(12)
    writing = True

    async def fold_meanwhile() -> int:
        folds = 0
        while writing:
            async with db.connection() as conn:
                folds += await fold_counts(conn)
            await asyncio.sleep(0.005)
        return folds

    folder = asyncio.create_task(fold_meanwhile())
    try:
        await asyncio.gather(
            write_deliveries(db, user.id, random.Random(rng.random())),
            write_jobs(db, random.Random(rng.random())),
            write_suppressions(db, random.Random(rng.random())),
        )
    finally:
        writing = False
    assert await folder > 0  # folds really ran in between the writes
    expected = await true_counts(db)
    assert all(expected.values()), expected  # every family has rows to count

    metrics = Metrics()
    await metrics.refresh(db)
    assert metrics.state.database_up
    assert figures(metrics.state.snapshot) == expected
    # After a fold there is one row per label pair: a read stays this small.
    rows = await db.fetch_val("SELECT count(*) FROM metric_counts")
    assert rows == sum(len(counts) for counts in expected.values())

    # TRUNCATE fires no row triggers; its own trigger forgets the family.
    await db.execute("TRUNCATE notifications CASCADE")
    await db.execute("TRUNCATE email_suppressions")
    await metrics.refresh(db)
    assert figures(metrics.state.snapshot) == {**expected, "deliveries": {}, "suppressions": {}}


class TestExhaustedPool:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["DB_POOL_MAX"] = "3"
        env["TENANTD_METRICS_REFRESH_SECONDS"] = "0.1"
        return env

    async def test_scrape_answers_with_the_last_figures(
        self, client: TestClient[Any, Any], app: web.Application, db: Database, factory: Any
    ) -> None:
        user = await factory.user()
        notification = await db.fetch_val(
            "INSERT INTO notifications (user_id, event_type, title) VALUES (%(u)s, 't', 'T')"
            " RETURNING id",
            {"u": user.id},
        )
        await db.execute(
            "INSERT INTO notification_deliveries (notification_id, channel, status)"
            " VALUES (%(n)s, 'email', 'sent'), (%(n)s, 'in_app', 'sent')",
            {"n": notification},
        )

        def sent(samples: Samples) -> float:
            return value(samples, "tenantd_notification_deliveries", channel="email", status="sent")

        async def counted() -> bool:
            return sent(await scrape(client)) == 1

        await eventually(counted)
        pool = app[DOMAINS].db.pool
        held = [await pool.acquire() for _ in range(int(pool.maxsize or 0))]
        try:
            assert pool.freesize == 0 and pool.size == pool.maxsize

            async def refresh_failed() -> Samples | None:
                samples = await scrape(client)
                return samples if value(samples, "tenantd_database_up") == 0 else None

            # The refresh task finds no connection (tenantd_database_up 0) ...
            samples = await eventually(refresh_failed, within=30)
            # ... and scrapes still answer, with the figures last read.
            for _ in range(3):
                assert sent(samples) == 1
                assert value(samples, "tenantd_db_pool_connections", state="free") == 0
                assert value(samples, "tenantd_metrics_state_age_seconds") > 0
                samples = await scrape(client)
        finally:
            for conn in held:
                await pool.release(conn)
        await eventually(lambda: database_up_again(client), within=30)


async def database_up_again(client: TestClient[Any, Any]) -> bool:
    return value(await scrape(client), "tenantd_database_up") == 1


SEEDED = 2_000  # notifications, four deliveries each

SEED_DELIVERIES = """
WITH made AS (
    INSERT INTO notifications (user_id, event_type, title)
    SELECT %(u)s, 'seed', 'Seed' FROM generate_series(1, %(n)s)
    RETURNING id
)
INSERT INTO notification_deliveries (notification_id, channel, status)
SELECT made.id, c.channel, 'sent'
  FROM made CROSS JOIN (VALUES ('in_app'), ('email'), ('sse'), ('web_push')) AS c(channel)
"""


class HealthProbe:
    """Asks /healthz again and again from its own thread (a blocking keep-alive connection),
    so what it measures is the server, not this test's event loop busy with the scrapes."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.results: list[tuple[int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                response.read()
                self.results.append((response.status, time.perf_counter() - started))
        finally:
            conn.close()


async def test_fifty_concurrent_scrapes_leave_healthz_fast(
    db: Database, factory: Any, migrated: str, tmp_path: Path
) -> None:
    user = await factory.user()
    started = time.perf_counter()
    async with db.connection() as conn, conn.raw.cursor(timeout=600) as cur:
        # Over the pool's 30 s bound on a busy machine (index and foreign-key upkeep).
        await cur.execute(SEED_DELIVERIES, {"u": user.id, "n": SEEDED})
    seeded = time.perf_counter() - started
    assert await db.fetch_val("SELECT count(*) FROM notification_deliveries") == 4 * SEEDED

    env = server_env(migrated, tmp_path, SECRET, LOG_LEVEL="warning")
    env["TENANTD_SCHEDULER_ENABLED"] = "false"
    server = start_server("metrics", env, tmp_path)
    async with running([server]):
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http_client:

            async def scrape_once() -> tuple[int, bytes]:
                async with http_client.get(server.url + "/metrics") as response:
                    return response.status, await response.read()

            status, body = await scrape_once()
            assert status == 200
            sent = f'tenantd_notification_deliveries{{channel="email",status="sent"}} {SEEDED}'
            assert sent.encode() in body
            probe = HealthProbe(server.port)
            probing = asyncio.create_task(asyncio.to_thread(probe.run))
            await eventually(lambda: asyncio.sleep(0, probe.results))  # the probe is warm
            before = len(probe.results)
            scrape_started = time.perf_counter()
            try:
                rounds = await asyncio.gather(
                    *(asyncio.gather(*(scrape_once() for _ in range(50))) for _ in range(4))
                )
            finally:
                flood = time.perf_counter() - scrape_started
                probe.stop.set()
                await probing
            during = probe.results[before:]
    scrapes = [status for batch in rounds for status, _ in batch]
    assert scrapes == [200] * 200
    assert len(during) >= 3, f"only {len(during)} probe(s) while 200 scrapes ran ({flood:.2f}s)"
    assert [status for status, _ in during] == [200] * len(during)
    latencies = sorted(seconds for _, seconds in during)
    print(
        f"seeded {4 * SEEDED} deliveries in {seeded:.1f}s;"
        f" 4 x 50 concurrent scrapes took {flood:.2f}s;"
        f" /healthz meanwhile: n={len(latencies)}"
        f" median={statistics.median(latencies) * 1000:.1f}ms"
        f" max={latencies[-1] * 1000:.1f}ms"
    )
    assert statistics.median(latencies) < 0.1


REQUEST_TASKS = {"RequestHandler.start", "RequestHandler._handle_request"}


class TestScrapeRunsNoStatement:
    """A scrape takes no pool connection: the figures are the refresh task's (here it runs
    only at start). Acquisitions are counted by the task that makes them: aiohttp serves each
    request in a task of its RequestHandler, the background loops in their own.
    One statement per scrape would show as 100 acquisitions."""

    SCRAPES = 100

    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["TENANTD_METRICS_REFRESH_SECONDS"] = "3600"
        return env

    async def test_scrapes_acquire_no_connection(
        self,
        client: TestClient[Any, Any],
        app: web.Application,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        pool = app[DOMAINS].db.pool
        assert isinstance(pool, Pool)
        take_nowait, acquire = pool.take_nowait, pool.acquire
        by_requests = 0

        def by_a_request() -> None:
            nonlocal by_requests
            task = asyncio.current_task()
            if task is not None and task.get_coro().__qualname__ in REQUEST_TASKS:
                by_requests += 1

        # A checkout takes an idle connection (take_nowait) or waits for one (acquire).
        def counting_take_nowait() -> Any:
            by_a_request()
            return take_nowait()

        def counting_acquire() -> Any:
            by_a_request()
            return acquire()

        monkeypatch.setattr(pool, "take_nowait", counting_take_nowait)
        monkeypatch.setattr(pool, "acquire", counting_acquire)
        # The counter sees a request's statement (the check would fail if the rule broke).
        response = await client.get("/readyz")
        await response.read()
        assert by_requests >= 1
        by_requests = 0
        for _ in range(self.SCRAPES):
            samples = await scrape(client)
            assert value(samples, "tenantd_database_up") == 1
        assert by_requests == 0
