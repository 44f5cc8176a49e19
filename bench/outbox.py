"""Outbound webhooks: deliveries per second from the server to a local receiver (queue on),
and what the outbox costs a tenancy mutation (renames with and without an endpoint)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.private_servers import free_port
from bench.rounds import ROUNDS, median_of
from bench.seed import account_uuid, user_uuid
from tenantd.accounts import service as accounts
from tenantd.app.bundle import open_services
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.outbox import Actor, Event, emit_many
from tenantd.principal import Principal
from tenantd.webhooks.endpoints import new_secret

ROOT = Path(__file__).resolve().parents[1]
DELIVERIES = 20_000
WARM_UP = 4_000
RENAMES = 2_000
# Without/with pairs, the order alternating (BENCH_OVERHEAD_PAIRS for a shorter look).
OVERHEAD_PAIRS = int(os.environ.get("BENCH_OVERHEAD_PAIRS", "8"))
CONCURRENCY = 32


class Receiver:
    def __init__(self, niceness: str = "0") -> None:
        self.port = free_port()
        self.secret = new_secret()
        command = [sys.executable, "-m", "bench.webhook_receiver", str(self.port), self.secret]
        # It stands for the subscriber's machine: on the load core, and for the overhead
        # figure at a lower priority (`niceness`: it takes what the renaming driver leaves of
        # that core).
        if (os.cpu_count() or 1) >= 2:
            command = ["taskset", "-c", "1", *command]
        if niceness != "0":
            command = ["nice", "-n", niceness, *command]
        self.process = subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.stats(timeout=2)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("receiver did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stats(self, timeout: float = 30) -> dict[str, int]:
        # At the lowest priority on a busy machine the receiver can wait seconds for a turn.
        url = f"http://127.0.0.1:{self.port}/stats"
        with urllib.request.urlopen(url, timeout=timeout) as answer:
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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _children(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                pids.append(int(entry.name))
    return pids


# Rows written per half: what the endpoint adds to the database (inserts, updates, deletes).
ROW_WRITES = """
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
  FROM pg_stat_user_tables
 WHERE relname IN ('outbox_events', 'webhook_deliveries', 'jobs', 'outbox_sequencer')
"""


class Meter:
    """CPU seconds of the server, the receiver, PostgreSQL's processes and this process (the
    renaming driver), rows written to the outbox/delivery/job tables and transactions, from one
    `take()` to the next."""

    def __init__(self, db: Any, server_pid: int | None, receiver: Receiver, postmaster: int | None):
        self.db = db
        self.server_pid = server_pid
        self.receiver = receiver
        self.postmaster = postmaster

    def _postgres(self) -> dict[int, float]:
        if self.postmaster is None:
            return {}
        return {pid: _cpu_seconds(pid) for pid in _children(self.postmaster)}

    async def take(self) -> dict[str, Any]:
        await self.db.execute("SELECT pg_stat_clear_snapshot()")
        return {
            "server": _cpu_seconds(self.server_pid) if self.server_pid else 0.0,
            "receiver": _cpu_seconds(self.receiver.process.pid),
            "postgres": self._postgres(),
            "driver": time.process_time(),
            "rows": await self.db.fetch_val(ROW_WRITES),
            "xacts": await self.db.fetch_val(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ),
            "received": self.receiver.stats()["n"],
            "at": time.perf_counter(),
        }

    @staticmethod
    def per(before: dict[str, Any], after: dict[str, Any], count: int) -> dict[str, Any]:
        """Per rename: CPU in microseconds, rows and transactions."""
        pg = sum(t - before["postgres"].get(pid, 0.0) for pid, t in after["postgres"].items())
        cpu = {
            "server": after["server"] - before["server"],
            "receiver": after["receiver"] - before["receiver"],
            "postgres": pg,
            "driver": after["driver"] - before["driver"],
        }
        result: dict[str, Any] = {f"{k}_us": round(v / count * 1e6) for k, v in cpu.items()}
        result["total_us"] = round(sum(cpu.values()) / count * 1e6)
        result["rows"] = round((after["rows"] - before["rows"]) / count, 2)
        result["xacts"] = round((after["xacts"] - before["xacts"]) / count, 2)
        result["received"] = after["received"] - before["received"]
        return result


async def _postmaster(db: Any) -> int | None:
    """The PostgreSQL server's pid, when it runs on this machine and its directory is readable."""
    try:
        directory = await db.fetch_val("SHOW data_directory")
        return int((Path(directory) / "postmaster.pid").read_text().split()[0])
    except Exception:
        return None


async def _half(
    services: Any, meter: Meter, plan: Any, offset: int, receiver: Receiver | None
) -> dict[str, Any]:
    """One timed half: RENAMES renames, with an endpoint receiving every event if `receiver`.
    CPU and rows are counted over the renames (`during`) and, with an endpoint, until every
    delivery is settled (`drained`: the whole cost of the events, deferred work included)."""
    endpoint = None if receiver is None else await _add_endpoint(services.db, receiver)
    try:
        start = await meter.take()
        rate = await _renames(services, plan.accounts, RENAMES, offset)
        during = await meter.take()
        await _drained(services.db, time.perf_counter())
        drained = await meter.take()
    finally:
        if endpoint is not None:
            await services.db.execute(
                "DELETE FROM webhook_endpoints WHERE id = %(e)s", {"e": endpoint}
            )
    return {
        "rate": rate,
        "during": Meter.per(start, during, RENAMES),
        "drained": Meter.per(start, drained, RENAMES),
        "drain_seconds": round(drained["at"] - during["at"], 2),
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _median_costs(halves: list[dict[str, Any]], part: str) -> dict[str, float]:
    keys = [k for k in halves[0][part] if k != "received"]
    return {k: _median([h[part][k] for h in halves]) for k in keys}


async def _overhead(env: dict[str, str], database_url: str, plan: Any) -> dict[str, Any]:
    """Pairs of halves without and with an endpoint, the order alternating from pair to pair
    (a drifting machine load favours neither side). The figure is the median of the pairs'
    own differences (each pair ran back to back, so it shares the machine's load of the
    moment); the difference of the two sides' medians and the spread are given alongside."""
    settings = load_settings(environ={**env, "DB_POOL_MAX": str(CONCURRENCY)})
    server_pid = int(env["BENCH_SERVER_PID"]) if env.get("BENCH_SERVER_PID") else None
    receiver = Receiver(niceness=os.environ.get("BENCH_RECEIVER_NICE", "19"))
    try:
        async with open_services(settings, database_url) as services:
            await services.db.execute("DELETE FROM webhook_endpoints")  # a kept database's
            meter = Meter(services.db, server_pid, receiver, await _postmaster(services.db))
            await _renames(services, plan.accounts, 300, 0)  # warm-up
            without: list[dict[str, Any]] = []
            with_endpoint: list[dict[str, Any]] = []
            for pair in range(OVERHEAD_PAIRS):
                offset = 10_000 * (pair + 1)
                if pair % 2:
                    with_endpoint.append(
                        await _half(services, meter, plan, offset + 5_000, receiver)
                    )
                    without.append(await _half(services, meter, plan, offset, None))
                else:
                    without.append(await _half(services, meter, plan, offset, None))
                    with_endpoint.append(
                        await _half(services, meter, plan, offset + 5_000, receiver)
                    )
        rates_without = [h["rate"] for h in without]
        rates_with = [h["rate"] for h in with_endpoint]
        base, with_rate = _median(rates_without), _median(rates_with)
        pairs = [
            round((1 - w / b) * 100, 1) for b, w in zip(rates_without, rates_with, strict=True)
        ]
        ordered = sorted(pairs)
        quarter = len(ordered) // 4
        return {
            "rate": round(with_rate, 1),
            "without_endpoint": round(base, 1),
            "overhead_pct": round(_median(pairs), 1),
            "overhead_of_medians_pct": round((1 - with_rate / base) * 100, 1),
            "pair_overheads_pct": pairs,
            "spread_pct": {
                "min": ordered[0],
                "quartiles": [ordered[quarter], ordered[-1 - quarter]],
                "max": ordered[-1],
            },
            "rounds_without": [round(r, 1) for r in rates_without],
            "rounds_with": [round(r, 1) for r in rates_with],
            # Deliveries the receiver got while the renames ran, per rename (1.0: delivery kept
            # pace; less: part of the work was deferred past the timed half).
            "delivered_during": [
                round(h["during"]["received"] / RENAMES, 2) for h in with_endpoint
            ],
            "drain_seconds": [h["drain_seconds"] for h in with_endpoint],
            "per_rename_without": _median_costs(without, "during"),
            "per_rename_with": _median_costs(with_endpoint, "during"),
            "per_rename_with_drained": _median_costs(with_endpoint, "drained"),
            "renames_per_half": RENAMES,
            "unit": "renames/s",
        }
    finally:
        receiver.stop()


def outbox_overhead(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(_overhead(env, env["DATABASE_URL"], plan))
