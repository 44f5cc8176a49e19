"""Outbound webhooks: deliveries per second from the server to a local receiver (queue on),
and what the outbox costs a tenancy mutation (renames with and without an endpoint)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.rounds import ROUNDS, median_of
from bench.seed import account_uuid, user_uuid
from tenantd.accounts import service as accounts
from tenantd.app.services import open_services
from tenantd.db.core import create_database
from tenantd.outbox import Actor, Event, emit_many
from tenantd.principal import Principal
from tenantd.settings import load_settings
from tenantd.webhooks.endpoints import new_secret

ROOT = Path(__file__).resolve().parents[1]
DELIVERIES = 20_000
WARM_UP = 4_000
RENAMES = 2_000
OVERHEAD_PAIRS = 6  # without/with pairs, the order alternating
CONCURRENCY = 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Receiver:
    def __init__(self) -> None:
        self.port = _free_port()
        self.secret = new_secret()
        command = [sys.executable, "-m", "bench.webhook_receiver", str(self.port), self.secret]
        if (os.cpu_count() or 1) >= 2:
            command = ["taskset", "-c", "1", *command]
        self.process = subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.stats()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("receiver did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=2) as answer:
            result: dict[str, int] = json.loads(answer.read())
            return result

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def _add_endpoint(db: Any, receiver: Receiver) -> uuid.UUID:
    endpoint_id: uuid.UUID = await db.fetch_val(
        "INSERT INTO webhook_endpoints (url, secret, description)"
        " VALUES (%(u)s, %(s)s, 'bench') RETURNING id",
        {"u": receiver.url, "s": receiver.secret},
    )
    return endpoint_id


async def _open(db: Any) -> int:
    value: int = await db.fetch_val(
        "SELECT (SELECT count(*) FROM outbox_events WHERE seq IS NULL)"
        " + (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')"
    )
    return value


async def _drained(db: Any, started: float, limit: float = 300.0) -> None:
    """Wait until every event is relayed and every delivery settled (or `limit` passed)."""
    while time.perf_counter() - started < limit:
        if await _open(db) == 0:
            return
        await asyncio.sleep(0.05)


async def _deliveries(dsn: str, receiver: Receiver) -> dict[str, Any]:
    db = await create_database(dsn, minsize=1, maxsize=4)
    try:
        # A kept database (BENCH_KEEP_DB, --no-seed) may hold an earlier run's endpoints.
        await db.execute("DELETE FROM webhook_endpoints")
        endpoint = await _add_endpoint(db, receiver)
        actor = Actor.system("bench")

        async def emit(round_: object, count: int) -> None:
            for chunk in range(0, count, 1000):
                async with db.transaction() as conn:
                    await emit_many(
                        conn,
                        [
                            Event("bench.ping", None, actor, {"id": f"{round_}-{n}"})
                            for n in range(chunk, chunk + 1000)
                        ],
                    )

        # Untimed: on a new database the delivery and job tables are empty and the planner's
        # statistics say so; the first burst then runs at a fifth of the rate until autovacuum
        # has analysed them (below; measured: 266/s, then 1,767/s). The figure is the sustained
        # rate.
        await emit("warm-up", WARM_UP)
        await _drained(db, time.perf_counter())
        # What autovacuum does within its first minute of a production database's life.
        await db.execute("ANALYZE outbox_events, webhook_deliveries, jobs")
        rounds = []
        for round_ in range(ROUNDS):
            before = receiver.stats()["n"]
            started = time.perf_counter()
            await emit(round_, DELIVERIES)
            await _drained(db, started)
            elapsed = time.perf_counter() - started
            received = receiver.stats()["n"] - before
            rounds.append(
                {"rate": round(DELIVERIES / elapsed, 1), "count": DELIVERIES, "received": received}
            )
        await db.execute("DELETE FROM webhook_endpoints WHERE id = %(e)s", {"e": endpoint})
        bad = receiver.stats()["bad"]
        return {**median_of(rounds), "unit": "deliveries/s", "bad_signatures": bad}
    finally:
        await db.close()


def webhook_deliveries(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    receiver = Receiver()
    try:
        return asyncio.run(_deliveries(dsn, receiver))
    finally:
        receiver.stop()


async def _renames(services: Any, accounts_count: int, count: int, offset: int) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            n = queue.get_nowait()
            index = ((n * 37) % accounts_count) + 1
            actor = Principal(
                user_id=uuid.UUID(user_uuid(index)),
                account_id=uuid.UUID(account_uuid(index)),
                role="owner",
                jti=uuid.uuid4(),
                issued_at=time.time(),
                expires_at=time.time() + 900,
            )
            account = uuid.UUID(account_uuid(index))
            await accounts.rename_account(services, actor, account, name=f"bench {offset + n}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return count / (time.perf_counter() - started)


async def _with_endpoint(services: Any, receiver: Receiver, run: Any) -> float:
    """`run()` while an endpoint receives every event; then wait until all is delivered."""
    endpoint = await _add_endpoint(services.db, receiver)
    try:
        rate: float = await run()
        await _drained(services.db, time.perf_counter())
    finally:
        await services.db.execute("DELETE FROM webhook_endpoints WHERE id = %(e)s", {"e": endpoint})
    return rate


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


async def _overhead(env: dict[str, str], database_url: str, plan: Any) -> dict[str, Any]:
    """Pairs of rounds without and with an endpoint, the order alternating from pair to pair
    (a drifting machine load favours neither side); each side's median over the pairs."""
    settings = load_settings(environ={**env, "DB_POOL_MAX": str(CONCURRENCY)})
    receiver = Receiver()
    try:
        async with open_services(settings, database_url) as services:
            await services.db.execute("DELETE FROM webhook_endpoints")  # a kept database's
            await _renames(services, plan.accounts, 300, 0)  # warm-up
            without: list[float] = []
            with_endpoint: list[float] = []
            for pair in range(OVERHEAD_PAIRS):
                offset = 10_000 * (pair + 1)

                async def plain(offset: int = offset) -> float:
                    return await _renames(services, plan.accounts, RENAMES, offset)

                async def loaded(offset: int = offset) -> float:
                    return await _with_endpoint(
                        services,
                        receiver,
                        lambda: _renames(services, plan.accounts, RENAMES, offset + 5_000),
                    )

                if pair % 2:
                    with_endpoint.append(await loaded())
                    without.append(await plain())
                else:
                    without.append(await plain())
                    with_endpoint.append(await loaded())
        base, with_rate = _median(without), _median(with_endpoint)
        pairs = [round((1 - w / b) * 100, 1) for b, w in zip(without, with_endpoint, strict=True)]
        return {
            "rate": round(with_rate, 1),
            "without_endpoint": round(base, 1),
            "overhead_pct": round((1 - with_rate / base) * 100, 1),
            "pair_overheads_pct": pairs,
            "rounds_without": [round(r, 1) for r in without],
            "rounds_with": [round(r, 1) for r in with_endpoint],
            "unit": "renames/s",
        }
    finally:
        receiver.stop()


def outbox_overhead(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_overhead(env, env["DATABASE_URL"], plan))
