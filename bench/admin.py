"""Operators (issue 28): `GET /api/v1/admin/users?query=` over at least 10,000 users (the seed
is topped up in SQL when the scale seeds fewer), with a `users:manage` key made by the CLI.

Three kinds of request, in turn: a substring of three characters or more (the trigram index),
a two-character email prefix (the text_pattern_ops index) and the unfiltered first page plus
the page after it (keyset on created_at, id). Latency per request and requests/s, 8 in flight.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import aiohttp

from bench.apikeys import create_key
from bench.rounds import ROUNDS, median_of
from tenantd.db.core import create_database

MIN_USERS = 10_000
IN_FLIGHT = 8
REQUESTS_PER_ROUND = 400
PATH = "/api/v1/admin/users"


async def top_up(dsn: str) -> tuple[int, list[str]]:
    """At least MIN_USERS live users (extra ones named like the seed's); the plans of the
    three kinds of query, so the figure says which index answered."""
    db = await create_database(dsn, minsize=1, maxsize=2)
    try:
        count: int = await db.fetch_val("SELECT count(*) FROM users WHERE deleted_at IS NULL")
        if count < MIN_USERS:
            await db.execute(
                "INSERT INTO users (email, first_name, last_name, email_verified_at, created_at)"
                " SELECT 'admin' || i || '@bench' || (i %% 997) || '.example', 'Ada' || i,"
                " 'Lovelace' || (i %% 101), now(), now() - (i || ' seconds')::interval"
                " FROM generate_series(1, %(n)s) i",
                {"n": MIN_USERS - count},
            )
        await db.execute("ANALYZE users")
        total: int = await db.fetch_val("SELECT count(*) FROM users WHERE deleted_at IS NULL")
        plans = []
        for where, pattern in (
            ("lower(u.email || ' ' || u.first_name || ' ' || u.last_name)", "%r12%"),
            ("lower(u.email)", "us%"),
            ("true OR u.email", ""),
        ):
            rows = await db.fetch_all(
                "EXPLAIN ANALYZE SELECT u.id, u.email, u.email_verified_at, u.disabled_at,"
                " u.created_at, u.last_sign_in_at FROM users u WHERE u.deleted_at IS NULL"
                f" AND ({where} LIKE %(p)s) ORDER BY u.created_at DESC, u.id DESC LIMIT 51",
                {"p": pattern},
            )
            lines = [str(r["QUERY PLAN"]).strip() for r in rows]
            scans = [line.split("  (")[0].lstrip("-> ") for line in lines if " on " in line]
            took = next(line for line in lines if line.startswith("Execution Time"))
            plans.append(f"{pattern or 'no query'}: {' / '.join(scans)}; {took}")
        return total, plans
    finally:
        await db.close()


def _queries(n: int) -> list[dict[str, str]]:
    """The n-th request's parameters: substring, short prefix, first page, in turn."""
    kinds = [{"query": f"r{100 + n % 900}"}, {"query": "us"}, {}]
    return [kinds[i % 3] for i in range(n)]


async def _round(url: str, token: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    todo = _queries(REQUESTS_PER_ROUND)
    latencies: list[float] = []
    failures = 0
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal failures
            while todo:
                params = todo.pop()
                began = time.perf_counter()
                async with session.get(url, params=params, headers=headers) as response:
                    body = await response.json()
                    failures += response.status != 200
                cursor = body.get("data", {}).get("nextCursor") if not params else None
                if cursor:  # the page after the first: keyset
                    async with session.get(
                        url, params={"cursor": cursor}, headers=headers
                    ) as response:
                        await response.read()
                        failures += response.status != 200
                latencies.append((time.perf_counter() - began) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "rate": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 2),
        "failures": failures,
    }


def admin_user_search(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """Admin user searches/s (and p50/p99 ms) over at least 10,000 users."""
    users, plans = asyncio.run(top_up(dsn))
    token = create_key(env, "users:manage")
    url = f"{server_url}{PATH}"

    async def run() -> dict[str, Any]:
        await _round(url, token)  # warm-up: key cached, pool ready
        rounds = [await _round(url, token) for _ in range(ROUNDS)]
        return {
            **median_of(rounds),
            "unit": "searches/s",
            "users": users,
            "in_flight": IN_FLIGHT,
            "plans": plans,
        }

    return asyncio.run(run())
