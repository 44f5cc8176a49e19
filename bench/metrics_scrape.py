"""GET /metrics over the seeded deliveries (1M at --scale 1): latency, and the statements the
database ran meanwhile beyond what the server runs when idle (its refresh, pub/sub pings,
job polling). A scrape that queried would add one or more per scrape; one that reads the last
refreshed figures adds none.

Statements are counted as transactions of the bench database (pg_stat_database): every
statement outside an explicit transaction is one. Backends report them within a second of
going idle, hence the pause before each reading.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import aiohttp

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn

SCRAPES = 2000
WARM_UP = 50
STATS_SETTLE_SECONDS = 1.5
LOAD_CPU = 1

TRANSACTIONS = (
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
)


async def _transactions(dsn: str) -> int:
    """The database's transaction count so far (this reading's own excluded)."""
    await asyncio.sleep(STATS_SETTLE_SECONDS)
    db = await create_database(dsn, minsize=1, maxsize=1)
    try:
        async with db.connection() as conn:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            value: int = await conn.fetch_val(TRANSACTIONS)
    finally:
        await db.close()
    return value


async def _scrape(server_url: str, dsn: str) -> dict[str, Any]:
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:  # one keep-alive connection, one at a time

        async def scrape() -> float:
            started = time.perf_counter()
            async with session.get(f"{server_url}/metrics") as response:
                assert response.status == 200, response.status
                await response.read()
            return time.perf_counter() - started

        for _ in range(WARM_UP):
            await scrape()
        idle_from = await _transactions(dsn)
        idle_started = time.perf_counter()
        for _ in range(SCRAPES):
            latencies.append(await scrape())
        window = time.perf_counter() - idle_started
        scraped_to = await _transactions(dsn)
        # The same window again without scrapes: what the server runs anyway.
        await asyncio.sleep(window)
        idle_to = await _transactions(dsn)
    background = idle_to - scraped_to - 1  # minus the reading of `scraped_to` itself
    during = scraped_to - idle_from - 1
    latencies.sort()
    return {
        "requests": SCRAPES,
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
        "rps": round(SCRAPES / window, 1),
        "statements_during": during,
        "statements_idle_window": background,
        "statements_per_scrape": round(max(during - background, 0) / SCRAPES, 3),
    }


def metrics_scrape(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    own_cpus = os.sched_getaffinity(0)
    if LOAD_CPU in own_cpus and len(own_cpus) > 1:
        os.sched_setaffinity(0, {LOAD_CPU})  # the client stays off the server's core
    try:
        result = asyncio.run(_scrape(server_url, url_to_dsn(env["DATABASE_URL"])))
    finally:
        os.sched_setaffinity(0, own_cpus)
    result["deliveries_seeded"] = plan.notifications
    return result
