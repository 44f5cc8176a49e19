"""The cost of one statement's round trip on the client: a prepared `SELECT 1`.

Client CPU per statement (this process's utime+stime over the run, divided by the statements)
and statements/s, for:

- `tenantd`: `Database.fetch_val(Prepared(...))`, tenantd's normal path (pool checkout, run,
  release) for a single statement;
- `tenantd_conn`: `Conn.fetch_val` on a connection already held (what a statement costs
  inside a `connection()` or `transaction()` block);
- `aiopg`: the same through plain aiopg (`pool.acquire()`, `conn.cursor()`, `execute`,
  `fetchone`);
- `psycopg2`: blocking psycopg2 on one connection, one at a time (the floor, for scale).

Each asyncio mode runs with one statement in flight and with many (`--in-flight`, default
32, over a pool of `--pool` connections, default 10 like DB_POOL_MAX).

    python -m bench.db_roundtrip                  # its own cluster under var/dbrt
    python -m bench.db_roundtrip --dsn "host=... dbname=..." --modes tenantd --json

`scripts/bench` runs it as the `db_roundtrip` figure (`figure()` below): tenantd's path, many
in flight, pinned to the server's core; statements/s against hello-world.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("tenantd", "tenantd_conn", "aiopg", "psycopg2")
PREPARE = "PREPARE bench_one AS SELECT 1"


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _result(mode: str, in_flight: int, count: int, wall: float, cpu: float) -> dict[str, Any]:
    return {
        "mode": mode,
        "in_flight": in_flight,
        "statements": count,
        "rate": round(count / wall, 1),
        "cpu_us_per_statement": round(cpu / count * 1e6, 1),
    }


Statement = Callable[[], Awaitable[Any]]


async def _drive(
    one: Statement | list[Statement], in_flight: int, seconds: float
) -> tuple[int, float, float]:
    """Run `one` (or task i runs `one[i]`) from `in_flight` tasks for `seconds`;
    (statements, wall, cpu)."""
    calls = one if isinstance(one, list) else [one] * in_flight
    for _ in range(200):  # warm: every connection opened and its statement prepared
        await asyncio.gather(*(call() for call in calls))
    count = 0
    stop = time.perf_counter() + seconds

    async def worker(call: Statement) -> None:
        nonlocal count
        while time.perf_counter() < stop:
            for _ in range(50):
                await call()
            count += 50

    cpu0, wall0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker(call) for call in calls))
    return count, time.perf_counter() - wall0, _cpu() - cpu0


async def run_tenantd(dsn: str, in_flight: int, seconds: float, pool: int, held: bool) -> Any:
    from tenantd.db.core import Prepared, create_database

    one_stmt = Prepared("bench_one", "SELECT 1")
    db = await create_database(dsn, minsize=min(pool, in_flight), maxsize=pool)
    try:
        if not held:

            async def one() -> Any:
                return await db.fetch_val(one_stmt)

            return await _drive(one, in_flight, seconds)
        # Each task holds a connection of its own (in_flight <= pool).
        async with contextlib.AsyncExitStack() as stack:
            conns = [await stack.enter_async_context(db.connection()) for _ in range(in_flight)]
            calls: list[Statement] = [functools.partial(conn.fetch_val, one_stmt) for conn in conns]
            return await _drive(calls, in_flight, seconds)
    finally:
        await db.close()


async def run_aiopg(dsn: str, in_flight: int, seconds: float, pool_size: int) -> Any:
    import aiopg

    pool = await aiopg.create_pool(
        dsn, minsize=min(pool_size, in_flight), maxsize=pool_size, enable_hstore=False
    )
    prepared: set[Any] = set()

    async def one() -> Any:
        async with pool.acquire() as conn, conn.cursor() as cur:
            if conn not in prepared:
                await cur.execute(PREPARE)
                prepared.add(conn)
            await cur.execute("EXECUTE bench_one")
            return await cur.fetchone()

    try:
        return await _drive(one, in_flight, seconds)
    finally:
        pool.close()
        await pool.wait_closed()


def run_psycopg2(dsn: str, seconds: float) -> tuple[int, float, float]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(PREPARE)
    for _ in range(1000):
        cur.execute("EXECUTE bench_one")
        cur.fetchone()
    count = 0
    cpu0, wall0 = _cpu(), time.perf_counter()
    stop = wall0 + seconds
    while time.perf_counter() < stop:
        for _ in range(100):
            cur.execute("EXECUTE bench_one")
            cur.fetchone()
        count += 100
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    conn.close()
    return count, wall, cpu


def measure(dsn: str, mode: str, in_flight: int, seconds: float, pool: int) -> dict[str, Any]:
    if mode == "psycopg2":
        count, wall, cpu = run_psycopg2(dsn, seconds)
        return _result(mode, 1, count, wall, cpu)
    if mode == "tenantd":
        coro = run_tenantd(dsn, in_flight, seconds, pool, held=False)
    elif mode == "tenantd_conn":
        coro = run_tenantd(dsn, min(in_flight, pool), seconds, pool, held=True)
        in_flight = min(in_flight, pool)
    elif mode == "aiopg":
        coro = run_aiopg(dsn, in_flight, seconds, pool)
    else:
        raise SystemExit(f"unknown mode {mode}")
    count, wall, cpu = asyncio.run(coro)
    return _result(mode, in_flight, count, wall, cpu)


def figure(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """scripts/bench's `db_roundtrip`: tenantd's path, 32 in flight, on the server's core."""
    command = [sys.executable, "-m", "bench.db_roundtrip", "--dsn", dsn, "--json"]
    command += ["--modes", "tenantd", "--in-flight", "32", "--seconds", "5"]
    if (os.cpu_count() or 1) >= 2:
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(
        command,
        env=dict(env, PYTHONPATH=str(ROOT)),
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result = json.loads(done.stdout)[0]
    return {
        "rate": result["rate"],
        "unit": "statements/s",
        "in_flight": result["in_flight"],
        "cpu_us_per_statement": result["cpu_us_per_statement"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.db_roundtrip", description=__doc__)
    parser.add_argument("--dsn", default="", help="libpq DSN (default: a cluster in var/dbrt)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--in-flight", default="1,32", help="comma list of concurrencies")
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", action="store_true", help="print JSON results only")
    args = parser.parse_args()
    dsn = args.dsn
    if not dsn:
        from tenantd.db.dsn import url_to_dsn
        from tenantd.db.embedded import EmbeddedCluster

        cluster = EmbeddedCluster(ROOT / "var" / "dbrt" / "pg")
        cluster.start()
        dsn = url_to_dsn(cluster.url)
    results = []
    for mode in args.modes.split(","):
        for in_flight in (int(n) for n in args.in_flight.split(",")):
            if mode == "psycopg2" and in_flight != 1:
                continue
            result = measure(dsn, mode, in_flight, args.seconds, args.pool)
            results.append(result)
            if not args.json:
                print(
                    f"{mode:13} in flight {result['in_flight']:3}: {result['rate']:9,.0f} /s"
                    f"  client CPU {result['cpu_us_per_statement']:6.1f} us/statement"
                )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
