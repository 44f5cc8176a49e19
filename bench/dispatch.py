"""Notification dispatch rate (inline and queued) and SSE delivery latency with many clients.

Both drive the real `tenantd.notifications.send` from this separate process with its own
Services; the queued figure counts until the server's job runner has persisted every one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from typing import Any

import aiohttp
import orjson

from bench import keys
from bench.rounds import ROUNDS, median_of
from bench.seed import account_uuid, user_uuid
from tenantd.app.services import open_services
from tenantd.cache.keyring import Keyring
from tenantd.identity.tokens import issue_access_token
from tenantd.notifications import send
from tenantd.settings import load_settings

CONCURRENCY = 32


def _settings(env: dict[str, str], **overrides: str) -> Any:
    return load_settings(environ={**env, **overrides})


async def _send_many(services: Any, users: int, count: int, start: int = 0) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(start, start + count):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            user = uuid.UUID(user_uuid((n % users) + 1))
            await send(services, "bench.event", recipient_user_id=user, payload={"n": n})

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def _inline(env: dict[str, str], database_url: str, users: int, count: int) -> dict[str, Any]:
    settings = _settings(env, QUEUES_ENABLED="false", DB_POOL_MAX=str(CONCURRENCY))
    rounds = []
    async with open_services(settings, database_url) as services:
        await _send_many(services, users, 200)  # warm-up: pool, prepared plans
        for round_ in range(ROUNDS):
            started = time.perf_counter()
            await _send_many(services, users, count, start=1000 + round_ * count)
            elapsed = time.perf_counter() - started
            rounds.append({"rate": round(count / elapsed, 1), "count": count})
    return {**median_of(rounds), "unit": "notifications/s"}


async def _queued(env: dict[str, str], database_url: str, users: int, count: int) -> dict[str, Any]:
    settings = _settings(env, QUEUES_ENABLED="true", DB_POOL_MAX=str(CONCURRENCY))
    rounds = []
    async with open_services(settings, database_url) as services:
        for round_ in range(ROUNDS):
            rounds.append(await _queued_round(services, users, count, 100_000 + round_ * count))
    return {**median_of(rounds), "unit": "notifications/s"}


async def _queued_round(services: Any, users: int, count: int, first: int) -> dict[str, Any]:
    db = services.db
    # Probe only the small set of unfinished jobs: a count(*) over the notifications
    # table itself would steal database CPU from the run being measured.
    pending_sql = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
    started = time.perf_counter()
    await _send_many(services, users, count, start=first)
    enqueued = time.perf_counter() - started
    while await db.fetch_val(pending_sql) > 0:
        if time.perf_counter() - started > 120:
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    done = await db.fetch_val(
        "SELECT count(*) FROM notifications WHERE event_type = 'bench.event'"
        " AND (payload->>'n')::int BETWEEN %(lo)s AND %(hi)s"
        " AND created_at >= now() - make_interval(secs => %(s)s)",
        {"lo": first, "hi": first + count - 1, "s": elapsed + 1},
    )
    return {
        "rate": round(count / elapsed, 1),  # `delivered` must equal `count`
        "count": count,
        "delivered": done,
        "enqueue_rate": round(count / enqueued, 1),
    }


def dispatch_inline(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_inline(env, env["DATABASE_URL"], plan.users, 10_000))


def dispatch_queued(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_queued(env, env["DATABASE_URL"], plan.users, 15_000))


async def _sse(
    server_url: str, env: dict[str, str], keyring: Keyring, clients: int, per_client: int
) -> dict[str, Any]:
    latencies: list[float] = []
    received = 0
    ready = 0
    all_ready = asyncio.Event()
    expected = clients * per_client
    done = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client(index: int) -> None:
            nonlocal ready, received
            user = uuid.UUID(user_uuid(index))
            token, _ = issue_access_token(
                keyring, user_id=user, account_id=uuid.UUID(account_uuid(index))
            )
            async with session.get(
                f"{server_url}/api/v1/notifications/stream",
                headers={"Cookie": f"auth_token={token}", "Accept": "text/event-stream"},
            ) as response:
                assert response.status == 200, response.status
                ready += 1
                if ready == clients:
                    all_ready.set()
                async for line in response.content:
                    if not line.startswith(b"data:"):
                        continue
                    now = time.time()
                    message = orjson.loads(line[5:])
                    created = message["notification"]["createdAt"]
                    sent_at = _parse_ts(created)
                    latencies.append(now - sent_at)
                    received += 1
                    if received >= expected:
                        done.set()

        tasks = [asyncio.create_task(client(i)) for i in range(1, clients + 1)]
        await asyncio.wait_for(all_ready.wait(), 60)
        await asyncio.sleep(1)
        settings = _settings(env, QUEUES_ENABLED="false", DB_POOL_MAX="16")
        async with open_services(settings, env["DATABASE_URL"]) as services:
            for round_ in range(per_client):
                batch = [
                    send(
                        services,
                        "bench.event",
                        recipient_user_id=uuid.UUID(user_uuid(i)),
                        payload={"n": round_},
                    )
                    for i in range(1, clients + 1)
                ]
                # Spread each round over ~1 s so this measures delivery, not a burst queue.
                for chunk in range(0, len(batch), 50):
                    await asyncio.gather(*batch[chunk : chunk + 50])
                    await asyncio.sleep(0.05)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 30)
        rss = _rss_mb(env.get("BENCH_SERVER_PID"))  # with every client still connected
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    latencies.sort()
    if not latencies:
        return {"error": "no SSE message received"}
    return {
        "clients": clients,
        "messages": received,
        "expected": expected,
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
        "server_rss_mb": rss,
    }


def _rss_mb(pid: str | None) -> float | None:
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def _parse_ts(value: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def sse_latency(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    # The receipt time is taken in this process: a full collection here (1,000 streams'
    # objects) would be counted as server latency, so the load generator does not collect.
    gc.collect()
    gc.disable()
    try:
        return asyncio.run(
            _sse(
                server_url,
                env,
                keys.keyring_for(env),
                clients=min(1000, plan.accounts),
                per_client=3,
            )
        )
    finally:
        gc.enable()
