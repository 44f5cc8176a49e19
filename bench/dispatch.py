"""Notification dispatch rate (inline and queued) and SSE delivery latency with 10,000 streams.

Both drive the real `tenantd.notifications.send` from this separate process with its own
Services; the queued figure counts until the server's job runner has persisted every one.
"""

from __future__ import annotations

import asyncio
import os
import resource
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from bench import keys
from bench.loadgen import pin
from bench.rounds import ROUNDS, median_of
from bench.seed import account_uuid, user_uuid
from tenantd.app.bundle import open_services
from tenantd.app.settings import load_settings
from tenantd.db.relay import publishing
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.tokens import issue_access_token
from tenantd.notifications import send

CONCURRENCY = 32


def _settings(env: dict[str, str], **overrides: str) -> Any:
    return load_settings(environ={**env, **overrides})


async def _send_many(
    services: Any, users: int, count: int, start: int = 0, event: str = "bench.event"
) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(start, start + count):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            user = uuid.UUID(user_uuid((n % users) + 1))
            await send(services.notifications, event, recipient_user_id=user, payload={"n": n})

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
    # table itself would steal database CPU from the run being measured. Each status on its
    # own, so each probe reads its partial index (queued, running): `status IN (...)` matches
    # neither index and scanned the whole jobs table, every done job of the earlier rounds,
    # 20 times a second (~27 ms each with 45,000 rows).
    pending_sql = (
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'queued')"
        " OR EXISTS (SELECT 1 FROM jobs WHERE status = 'running')"
    )
    started = time.perf_counter()
    await _send_many(services, users, count, start=first)
    enqueued = time.perf_counter() - started
    while await db.fetch_val(pending_sql):
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


CATALOG = Path(__file__).with_name("event-catalog.json")  # bench.declared: bench.event as data


async def _inline_declared(
    env: dict[str, str], database_url: str, users: int, count: int
) -> dict[str, Any]:
    """The declarative twin of bench.event against the Python-defined one, rounds
    alternating in one process (so the machine's drift hits both alike)."""
    settings = _settings(
        env,
        QUEUES_ENABLED="false",
        DB_POOL_MAX=str(CONCURRENCY),
        TENANTD_EVENT_CATALOG=str(CATALOG),
    )
    rates: dict[str, list[dict[str, Any]]] = {"bench.event": [], "bench.declared": []}
    async with open_services(settings, database_url) as services:
        for event in rates:
            await _send_many(services, users, 200, event=event)  # warm-up
        first = 200_000
        for _round in range(ROUNDS):
            for event, rounds in rates.items():
                started, cpu = time.perf_counter(), time.process_time()
                await _send_many(services, users, count, start=first, event=event)
                elapsed = time.perf_counter() - started
                # This process's CPU per send (validation, renders, driver): what the kind of
                # definition changes, and steadier than the rate on a busy machine.
                cpu_us = (time.process_time() - cpu) / count * 1e6
                rounds.append(
                    {"rate": round(count / elapsed, 1), "count": count, "cpu_us": round(cpu_us, 1)}
                )
                first += count
    declared = median_of(rates["bench.declared"])
    python = median_of(rates["bench.event"])
    return {
        **declared,
        "python_rate": python["rate"],
        "python_rounds": python["rounds"],
        "cpu_us_per_send": sorted(r["cpu_us"] for r in rates["bench.declared"])[
            len(rates["bench.declared"]) // 2
        ],
        "python_cpu_us_per_send": sorted(r["cpu_us"] for r in rates["bench.event"])[
            len(rates["bench.event"]) // 2
        ],
        "ratio_to_python": round(declared["rate"] / python["rate"], 3),
        "unit": "notifications/s",
    }


def dispatch_inline_declared(
    server_url: str, dsn: str, env: dict[str, str], plan: Any
) -> dict[str, Any]:
    return asyncio.run(_inline_declared(env, env["DATABASE_URL"], plan.users, 10_000))


def dispatch_inline(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_inline(env, env["DATABASE_URL"], plan.users, 10_000))


def dispatch_queued(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_queued(env, env["DATABASE_URL"], plan.users, 15_000))


def _rss_mb(pid: str | None) -> float | None:
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


# --- 10,000 streams on one server -----------------------------------------------------------

SSE_STREAMS = int(os.environ.get("BENCH_SSE_STREAMS", "10000"))  # fewer for a quick look
SSE_ROUNDS = 3
SSE_FLEETS = 4  # client processes, all on the load core
SSE_SEND_CHUNK = 100
SSE_SEND_PAUSE = 0.05  # between chunks: a round is spread, so this measures delivery
LOAD_CPU = 1


def _sse_tokens(keyring: Keyring, clients: int, users: int) -> list[tuple[int, str]]:
    """(user index, token) per client: client c is a stream of user (c % users) + 1."""
    tokens = []
    for c in range(clients):
        index = (c % users) + 1  # account owners, so every token's membership is active
        token, _ = issue_access_token(
            keyring, user_id=uuid.UUID(user_uuid(index)), account_id=uuid.UUID(account_uuid(index))
        )
        tokens.append((index, token))
    return tokens


class _Fleet:
    """One `bench.sse_fleet` process on the load core."""

    def __init__(self, server_url: str, tokens: list[str], expected: int):
        self.process = subprocess.Popen(
            [*pin(LOAD_CPU), sys.executable, "-m", "bench.sse_fleet"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_raise_open_files_limit,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        spec = {"url": server_url, "tokens": tokens, "expected": expected}
        self.process.stdin.write(orjson.dumps(spec).decode() + "\n")
        self.process.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"SSE client process exited ({self.process.wait()})")
        message: dict[str, Any] = orjson.loads(line)
        return message

    def stop(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        result = self.read()
        while "latencies" not in result:  # a late "complete"
            result = self.read()
        self.process.wait(timeout=60)
        return result


def _raise_open_files_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _send_rounds(env: dict[str, str], users: int, rounds: int) -> None:
    settings = _settings(env, QUEUES_ENABLED="false", DB_POOL_MAX="16")
    # The sender is a tenantd process: its relay publishes what its commits announce at once
    # (without one, the server's relay would find the rows on its half-second sweep).
    async with open_services(settings, env["DATABASE_URL"]) as services, publishing(services.db):
        for round_ in range(rounds):
            for first in range(1, users + 1, SSE_SEND_CHUNK):
                last = min(first + SSE_SEND_CHUNK, users + 1)
                await asyncio.gather(
                    *(
                        send(
                            services.notifications,
                            "bench.event",
                            recipient_user_id=uuid.UUID(user_uuid(i)),
                            payload={"n": round_},
                        )
                        for i in range(first, last)
                    )
                )
                await asyncio.sleep(SSE_SEND_PAUSE)


def _percentile(values: list[float], share: float) -> float:
    return round(values[min(len(values) - 1, int(len(values) * share))] * 1000, 1)


def sse_latency_10000(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """10,000 streams of many users (up to 10 per user: the per-user cap) on the one server;
    each user gets one notification per round, which every stream of theirs must receive."""
    users = min(SSE_STREAMS, plan.accounts)
    tokens = _sse_tokens(keys.keyring_for(env), SSE_STREAMS, users)
    expected = SSE_STREAMS * SSE_ROUNDS
    shares = [[t for _, t in tokens[k::SSE_FLEETS]] for k in range(SSE_FLEETS)]
    own_cpus = os.sched_getaffinity(0)
    if LOAD_CPU in own_cpus and len(own_cpus) > 1:
        os.sched_setaffinity(0, {LOAD_CPU})  # the sender too stays off the server's core
    fleets = [_Fleet(server_url, share, SSE_ROUNDS) for share in shares]
    try:
        started = time.perf_counter()
        ready = [fleet.read() for fleet in fleets]
        opened = sum(r["ready"] for r in ready)
        attach_seconds = round(time.perf_counter() - started, 1)
        rss_attached = _rss_mb(env.get("BENCH_SERVER_PID"))
        time.sleep(1)
        asyncio.run(_send_rounds(env, users, SSE_ROUNDS))
        sent_seconds = round(time.perf_counter() - started, 1) - attach_seconds
        deadline = time.monotonic() + 30
        for fleet in fleets:  # each says "complete" once all its streams have all rounds
            left = max(deadline - time.monotonic(), 0)
            if select.select([fleet.process.stdout], [], [], left)[0]:
                fleet.read()
        rss = _rss_mb(env.get("BENCH_SERVER_PID"))  # with every client still connected
        results = [fleet.stop() for fleet in fleets]
    finally:
        for fleet in fleets:
            if fleet.process.poll() is None:
                fleet.process.kill()
        os.sched_setaffinity(0, own_cpus)
    latencies = sorted(x for r in results for x in r["latencies"])
    received = len(latencies)
    if not latencies:
        return {"error": "no SSE message received", "clients": opened}
    return {
        "clients": opened,
        "users": users,
        "refused": sum(r["failed"] for r in results),
        "expected": expected,
        "received": received,
        "dropped": sum(r["ended"] for r in results) + max(SSE_STREAMS - opened, 0),
        "missing": max(expected - received, 0),
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "max_ms": round(latencies[-1] * 1000, 1),
        "attach_seconds": attach_seconds,
        "send_seconds": sent_seconds,
        "server_rss_attached_mb": rss_attached,
        "server_rss_mb": rss,
    }
