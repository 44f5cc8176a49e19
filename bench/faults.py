"""scripts/faults: what a fault costs. Each scenario drives a real `tenantd serve` on a private
PostgreSQL cluster (var/faults/pg, made afresh) with local fakes (a Postmark-compatible mail
API and a webhook receiver in this process, loopback only), injects one fault, and counts:

- accepted: sends answered 202 (webhook scenario: events committed)
- persisted: accepted sends whose notification row exists (webhooks: delivery rows)
- delivered: accepted sends whose email reached the provider (webhooks: the receiver)
- lost: accepted but never delivered by the end of the scenario
- doubled: deliveries beyond the first of the same message
- recovery: seconds from the end of the fault to the first success after it

The load is a client that retries on errors with the same Idempotency-Key (as the API asks).
Bounded: a few hundred sends per scenario, each scenario under ~90 s, servers and cluster
stopped at the end. See docs/faults.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.private_servers import free_port
from tenantd.apikeys import service as apikeys
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster, find_pg_bin
from tenantd.db.migrate import migrate
from tenantd.outbox import Actor, Event, emit_many

ROOT = Path(__file__).resolve().parents[1]
SECRET = "faults-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
POSTMARK_TOKEN = "faults-postmark-token"
USERS = 50
SETTLE_SECONDS = 60.0  # after the fault, how long everything accepted may take to arrive
SCENARIOS = ("kill9_dispatch", "kill9_webhooks", "pg_restart", "pg_pause", "sigterm")


# --- local fakes ---------------------------------------------------------------------------


@dataclass
class Fakes:
    """A Postmark-compatible `POST /email` and a webhook receiver `POST /hook`."""

    mail_delay: float = 0.05
    hook_delay: float = 0.1
    mails: collections.Counter[str] = field(default_factory=collections.Counter)
    hooks: collections.Counter[str] = field(default_factory=collections.Counter)
    hook_arrivals: list[float] = field(default_factory=list)
    url: str = ""

    async def postmark(self, request: web.Request) -> web.Response:
        if request.headers.get("X-Postmark-Server-Token") != POSTMARK_TOKEN:
            return web.json_response({"ErrorCode": 10, "Message": "bad token"}, status=401)
        body = await request.json()
        await asyncio.sleep(self.mail_delay)
        self.mails[str(body["Subject"])] += 1
        return web.json_response(
            {"To": body["To"], "MessageID": str(uuid.uuid4()), "ErrorCode": 0, "Message": "OK"}
        )

    async def hook(self, request: web.Request) -> web.Response:
        self.hook_arrivals.append(time.monotonic())
        await request.read()
        await asyncio.sleep(self.hook_delay)
        self.hooks[request.headers["webhook-id"]] += 1
        return web.Response(status=204)


@contextlib.asynccontextmanager
async def serving_fakes(fakes: Fakes) -> AsyncIterator[Fakes]:
    app = web.Application()
    app.router.add_post("/email", fakes.postmark)
    app.router.add_post("/hook", fakes.hook)
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    fakes.url = f"http://127.0.0.1:{port}"
    try:
        yield fakes
    finally:
        await runner.cleanup()


# --- the system under test ------------------------------------------------------------------


class Server:
    """`tenantd serve` in its own process."""

    def __init__(self, env: dict[str, str], log_dir: Path, name: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = (log_dir / f"{name}.log").open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tenantd",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-migrate",
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    async def ready(self, http: aiohttp.ClientSession, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tenantd serve exited with {self.process.returncode}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(self.url + "/readyz", timeout=aiohttp.ClientTimeout(2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError("tenantd serve not ready")

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    async def stop(self) -> None:
        self.signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.process.wait, 30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            await asyncio.to_thread(self.process.wait, 5)


@dataclass
class World:
    cluster: EmbeddedCluster
    db: Any
    fakes: Fakes
    http: aiohttp.ClientSession
    token: str
    users: list[str]
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    servers: list[Server] = field(default_factory=list)

    def start(self, name: str) -> Server:
        server = Server(self.env, self.log_dir, name)
        self.servers.append(server)
        return server


def postgres_pids(cluster: EmbeddedCluster) -> list[int]:
    """The postmaster and its children (the backends, background workers)."""
    master = int((cluster.data / "postmaster.pid").read_text().split()[0])
    pids = [master]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == master:
                pids.append(int(stat.parent.name))
    return pids


def pg_ctl_restart(cluster: EmbeddedCluster) -> None:
    args = [str(find_pg_bin() / "pg_ctl"), "restart", "-m", "fast", "-w", "-D", str(cluster.data)]
    args += ["-l", str(cluster.root / "postgres.log")]
    if os.geteuid() == 0:
        args = ["runuser", "-u", "postgres", "--", *args]
    subprocess.run(args, check=True, capture_output=True, timeout=120)


async def until(check: Callable[[], bool], deadline: float) -> bool:
    """Poll `check` until it holds or the deadline passes; whether it held."""
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


# --- load -----------------------------------------------------------------------------------


@dataclass
class Load:
    """Sends with Idempotency-Keys, retried on any failure until answered 202."""

    world: World
    scenario: str
    target: str
    base: int = 0  # this scenario's payload numbers start here (mail subjects stay apart)
    accepted: dict[int, str] = field(default_factory=dict)  # n -> notification id
    fault_end: float | None = None
    first_success_after_fault: float | None = None
    errors: int = 0
    restart_ready_s: float | None = None

    async def send(self, n: int, deadline: float) -> None:
        body = {
            "type": "faults.ping",
            "recipientUserId": self.world.users[n % len(self.world.users)],
            "payload": {"n": self.base + n},
        }
        headers = {
            "Authorization": f"Bearer {self.world.token}",
            "Idempotency-Key": f"{self.scenario}-{n}",
        }
        while time.monotonic() < deadline:
            try:
                async with self.world.http.post(
                    self.target + "/api/v1/notifications/send",
                    json=body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=10),
                ) as response:
                    data = await response.json(content_type=None)
                    if response.status == 202:
                        self.accepted[n] = (data.get("data") or data)["id"]
                        now = time.monotonic()
                        if (
                            self.fault_end is not None
                            and self.first_success_after_fault is None
                            and now >= self.fault_end
                        ):
                            self.first_success_after_fault = now
                        return
            except (aiohttp.ClientError, TimeoutError, ValueError):
                pass
            self.errors += 1
            await asyncio.sleep(0.2)

    async def run(self, count: int, seconds: float) -> None:
        """`count` sends spread over `seconds`, 8 at a time."""
        gap = seconds / count
        deadline = time.monotonic() + seconds + SETTLE_SECONDS
        slots = asyncio.Semaphore(8)
        tasks = []

        async def one(n: int) -> None:
            async with slots:
                await self.send(n, deadline)

        for n in range(count):
            tasks.append(asyncio.create_task(one(n)))
            await asyncio.sleep(gap)
        await asyncio.gather(*tasks)


@dataclass
class Row:
    scenario: str
    fault: str
    accepted: int
    persisted: int
    delivered: int
    lost: int
    doubled: int
    recovery_s: float | None
    client_retries: int = 0
    restart_ready_s: float | None = None  # kill scenarios: kill -> new process ready


async def settle_mail(world: World, load: Load) -> Row:
    wanted = {f"Fault ping {load.base + n}" for n in load.accepted}
    deadline = time.monotonic() + SETTLE_SECONDS
    await until(lambda: wanted <= set(world.fakes.mails), deadline)
    # A moment for repeats still on their way (a re-run job after a lease ran out).
    await asyncio.sleep(2)
    ids = list(load.accepted.values())
    persisted = await world.db.fetch_val(
        "SELECT count(*) FROM notifications WHERE id = ANY(%(ids)s::uuid[])", {"ids": ids}
    )
    got = {s: c for s, c in world.fakes.mails.items() if s in wanted}
    recovery = None
    if load.fault_end is not None and load.first_success_after_fault is not None:
        recovery = round(load.first_success_after_fault - load.fault_end, 2)
    return Row(
        scenario=load.scenario,
        fault="",
        accepted=len(load.accepted),
        persisted=int(persisted),
        delivered=len(got),
        lost=len(wanted) - len(got),
        doubled=sum(c - 1 for c in got.values()),
        recovery_s=recovery,
        client_retries=load.errors,
        restart_ready_s=load.restart_ready_s,
    )


# --- scenarios ------------------------------------------------------------------------------

Scenario = Callable[[World, int], Awaitable[Row]]


async def _with_load(
    world: World,
    name: str,
    count: int,
    fault: Callable[[Load], Awaitable[None]],
) -> Row:
    server = world.start(f"{name}-a")
    await server.ready(world.http)
    load = Load(world, name, server.url, base=SCENARIOS.index(name) * 1_000_000)
    seconds = max(count / 30, 3.0)
    runner = asyncio.create_task(load.run(count, seconds))
    await until(lambda: len(load.accepted) >= count // 4 or runner.done(), time.monotonic() + 120)
    await fault(load)
    await runner
    return await settle_mail(world, load)


async def kill9_dispatch(world: World, count: int) -> Row:
    async def fault(load: Load) -> None:
        first = world.servers[-1]
        first.signal(signal.SIGKILL)
        await asyncio.to_thread(first.process.wait, 10)
        load.fault_end = time.monotonic()
        second = world.start("kill9_dispatch-b")
        await second.ready(world.http)
        load.restart_ready_s = round(time.monotonic() - load.fault_end, 2)
        load.target = second.url

    row = await _with_load(world, "kill9_dispatch", count, fault)
    row.fault = "kill -9 of the only instance under load, restarted at once"
    return row


async def pg_restart(world: World, count: int) -> Row:
    async def fault(load: Load) -> None:
        await asyncio.to_thread(pg_ctl_restart, world.cluster)
        load.fault_end = time.monotonic()

    row = await _with_load(world, "pg_restart", count, fault)
    row.fault = "pg_ctl restart -m fast under load"
    return row


async def pg_pause(world: World, count: int) -> Row:
    async def fault(load: Load) -> None:
        pids = postgres_pids(world.cluster)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(5)
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        load.fault_end = time.monotonic()

    row = await _with_load(world, "pg_pause", count, fault)
    row.fault = "PostgreSQL stopped (SIGSTOP) for 5 s under load"
    return row


async def sigterm(world: World, count: int) -> Row:
    second = world.start("sigterm-b")
    await second.ready(world.http)

    async def fault(load: Load) -> None:
        first = world.servers[-1]
        first.signal(signal.SIGTERM)
        load.target = second.url
        load.fault_end = time.monotonic()
        await asyncio.to_thread(first.process.wait, 60)

    row = await _with_load(world, "sigterm", count, fault)
    row.fault = "SIGTERM under load; a second instance takes the traffic"
    return row


async def kill9_webhooks(world: World, count: int) -> Row:
    """`count` events of 10 objects to a receiver answering in 0.1 s; kill -9 once a quarter
    arrived; restart."""
    await world.db.execute(
        "INSERT INTO webhook_endpoints (url, secret) VALUES (%(url)s, %(secret)s)",
        {"url": world.fakes.url + "/hook", "secret": "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"},
    )
    server = world.start("kill9_webhooks-a")
    await server.ready(world.http)
    actor = Actor.system("faults")
    async with world.db.transaction() as conn:
        event_ids = await emit_many(
            conn,
            [
                Event("user.updated", None, actor, {"id": f"faults-{n % 10}", "n": n})
                for n in range(count)
            ],
        )
    await until(lambda: sum(world.fakes.hooks.values()) >= count // 4, time.monotonic() + 120)
    server.signal(signal.SIGKILL)
    await asyncio.to_thread(server.process.wait, 10)
    killed = time.monotonic()
    second = world.start("kill9_webhooks-b")
    await second.ready(world.http)
    ready = round(time.monotonic() - killed, 2)
    deadline = time.monotonic() + SETTLE_SECONDS
    wanted = set(event_ids)
    await until(lambda: wanted <= set(world.fakes.hooks), deadline)
    await asyncio.sleep(2)
    persisted = await world.db.fetch_val("SELECT count(*) FROM webhook_deliveries")
    got = {i: c for i, c in world.fakes.hooks.items() if i in wanted}
    # The first request the restarted instance made (in-flight answers of the dead one
    # arrive after the kill too, but were sent before it).
    after = [at for at in world.fakes.hook_arrivals if at > killed]
    first_after = min(after) if after else None
    return Row(
        scenario="kill9_webhooks",
        fault="kill -9 mid-delivery (receiver answers in 0.1 s), restarted at once",
        accepted=count,
        persisted=int(persisted),
        delivered=len(got),
        lost=len(wanted) - len(got),
        doubled=sum(c - 1 for c in got.values()),
        recovery_s=round(first_after - killed, 2) if first_after else None,
        restart_ready_s=ready,
    )


RUNS: dict[str, Scenario] = {
    "kill9_dispatch": kill9_dispatch,
    "kill9_webhooks": kill9_webhooks,
    "pg_restart": pg_restart,
    "pg_pause": pg_pause,
    "sigterm": sigterm,
}


# --- setup and main -------------------------------------------------------------------------


async def prepare(cluster: EmbeddedCluster) -> tuple[Any, str, list[str]]:
    db = await create_database(url_to_dsn(cluster.url), minsize=1, maxsize=4)
    await migrate(db)
    rows = await db.fetch_all(
        "INSERT INTO users (email, first_name, last_name)"
        " SELECT 'faults' || g || '@example.com', 'F', 'B' FROM generate_series(1, %(n)s) g"
        " RETURNING id",
        {"n": USERS},
    )
    async with db.transaction() as conn:
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="faults", scopes="notifications:send"
        )
    return db, created.token, [str(r["id"]) for r in rows]


def server_env(cluster: EmbeddedCluster, fakes: Fakes, data_dir: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": cluster.url,
        "SECRET_KEY": SECRET,
        "TENANTD_DATA_DIR": str(data_dir),
        "PUBLIC_BASE_URL": "http://127.0.0.1:8080",
        "COOKIE_SECURE": "false",
        "LOG_LEVEL": "warning",
        "QUEUES_ENABLED": "true",
        "RATE_LIMIT_ENABLED": "false",
        "TENANTD_SCHEDULER_ENABLED": "false",
        "TENANTD_EVENT_MODULES": "bench.events",
        "EMAIL_PROVIDER": "postmark",
        "POSTMARK_SERVER_TOKEN": POSTMARK_TOKEN,
        "POSTMARK_API_URL": fakes.url,
        "TENANTD_WEBHOOK_RETRY_BASE_SECONDS": "1",
        "TENANTD_OUTBOX_POLL_SECONDS": "0.05",
        "JOB_LEASE_SECONDS": os.environ.get("FAULTS_JOB_LEASE_SECONDS", "5"),
        "PYTHONPATH": str(ROOT),
    }


def print_table(rows: list[Row]) -> None:
    head = ("scenario", "accepted", "persisted", "delivered", "lost", "doubled", "recovery s")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|")
    for row in rows:
        recovery = "-" if row.recovery_s is None else f"{row.recovery_s:.2f}"
        cells = (
            row.scenario,
            row.accepted,
            row.persisted,
            row.delivered,
            row.lost,
            row.doubled,
            recovery,
        )
        print("| " + " | ".join(str(c) for c in cells) + " |")
    for row in rows:
        ready = (
            ""
            if row.restart_ready_s is None
            else f"; new process ready after {row.restart_ready_s} s"
        )
        print(f"- {row.scenario}: {row.fault} (client retries: {row.client_retries}{ready})")


async def run_scenarios(
    cluster: EmbeddedCluster, base: Path, only: list[str], count: int
) -> list[Row]:
    rows: list[Row] = []
    async with serving_fakes(Fakes()) as fakes, aiohttp.ClientSession() as http:
        db, token, users = await prepare(cluster)
        world = World(cluster, db, fakes, http, token, users, base)
        world.env = server_env(cluster, fakes, base)
        try:
            for name in only:
                started = time.monotonic()
                try:
                    rows.append(await RUNS[name](world, count))
                finally:
                    for server in world.servers:
                        await server.stop()
                    world.servers.clear()
                print(f"{name}: done in {time.monotonic() - started:.0f} s", file=sys.stderr)
        finally:
            await db.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma list of: " + ", ".join(SCENARIOS))
    parser.add_argument("--count", type=int, default=300, help="sends (events) per scenario")
    parser.add_argument("--json", default=str(ROOT / "var" / "faults-results.json"))
    parser.add_argument(
        "--dir", default=str(ROOT / "var" / "faults"), help="made afresh: cluster, logs"
    )
    args = parser.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    base = Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = EmbeddedCluster(base / "pg")
    cluster.start()
    try:
        rows = asyncio.run(run_scenarios(cluster, base, only, args.count))
    finally:
        cluster.stop()
    Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    print_table(rows)


if __name__ == "__main__":
    main()
