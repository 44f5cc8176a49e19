"""scripts/cluster: a cluster that loses nothing (issue 31, part 4).

A private PostgreSQL primary, a streaming replica of it (`pg_basebackup -R`), a private
nats-server (JetStream on, its own store) and three `tenantd serve` (TENANTD_BUS=nats,
DATABASE_REPLICA_URLS=the replica, QUEUES_ENABLED on), all on loopback or Unix sockets. A
bounded load runs against them: sign-ins and token refreshes, notification sends over the
server API with an API key (retried with their Idempotency-Key), and one SSE reader per user
spread over the three instances. During the load one instance is killed with SIGKILL (and
started again), NATS is killed and started again, and the replica's replay is paused, then
resumed. Every fault waits for progress (sends accepted), never for a guessed time.

Afterwards, by the HTTP answers and SQL only (no internals of how tenantd publishes):

- deliveries: every accepted send has exactly one notification and one delivery row per
  channel of its event (in-app and SSE), and no notification beyond them;
- sse: every reader received every notification of its user (after reconnecting with
  Last-Event-ID where its stream broke); ids seen twice are counted and shown, not failed;
- sessions: no sign-in or refresh was refused; a request that failed did so only because it
  was on the killed instance, and its retry elsewhere succeeded;
- the SERVICE.md invariants: one active owner per live account, at most one active membership
  per (account, user), no account over its seat cap;
- the replica replayed everything once resumed.

Prints a table and exits non-zero when a check fails. See docs/scaling.md, "A cluster test".
The test (tests/cluster/test_cluster.py) runs `run()` at the "test" size.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg2

from bench.faults import ROOT, Server, free_port
from tenantd.accounts.provisioning import create_account
from tenantd.apikeys import service as apikeys
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster, find_pg_bin
from tenantd.db.migrate import migrate
from tenantd.identity import queries as identity_queries
from tenantd.identity.passwords import hash_password

SECRET = "cluster-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
PASSWORD = "cluster load passphrase"
ORIGIN = "http://127.0.0.1:8080"  # PUBLIC_BASE_URL: the Origin a browser would send
EVENT = "bench.event"  # bench/events.py: in-app + SSE
CHANNELS = {"in_app": 1, "sse": 1}  # the delivery rows each accepted send must have
STREAM = "/api/v1/notifications/stream"
INSTANCES = 3
# A commit's WAL is flushed (so streamed) before the primary answers, as in production.
PRIMARY_OPTIONS = "-c synchronous_commit=on -c wal_level=replica -c max_wal_senders=5"
WITHIN = 300.0  # seconds: what must happen gets this long, the machine may be busy
SERVE_WITHIN = 600.0  # seconds for a `tenantd serve` to answer /readyz (a loaded machine)
NATS = "/usr/sbin/nats-server"


@dataclass(frozen=True)
class Size:
    users: int  # one SSE reader each; also the recipients of the sends
    sends: int  # at least this many sends (the load goes on until every fault is done)
    rate: float  # sends started per second
    sessions: int  # clients that sign in, then refresh, in a loop


SIZES = {
    "test": Size(users=9, sends=120, rate=15.0, sessions=4),
    "default": Size(users=30, sends=600, rate=30.0, sessions=6),
}


# --- the processes --------------------------------------------------------------------------


class Nats:
    """A nats-server of this run, on its own port, JetStream on with its own store."""

    def __init__(self, root: Path):
        self.port = free_port()
        self.store = root / "nats"
        self.log = root / "nats.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.spawn()
        await until(self._accepts, "nats-server accepts connections")

    def spawn(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [NATS, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def _accepts(self) -> bool:
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        return True

    async def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            await asyncio.to_thread(self.process.wait, 30)


class Replicated:
    """The primary and its streaming replica (as tests/replica.py builds them)."""

    def __init__(self, root: Path):
        self.primary = EmbeddedCluster(root / "primary", options=PRIMARY_OPTIONS)
        self.replica = EmbeddedCluster(root / "replica")

    def build(self) -> None:
        """Start the primary, migrate it, clone it with pg_basebackup -R, start the clone."""
        self.primary.start()
        asyncio.run(_migrate(self.primary.url))
        self.replica._prepare_dirs()
        result = self.replica._run(
            [
                str(find_pg_bin() / "pg_basebackup"),
                *("-h", str(self.primary.socket_dir), "-U", "postgres"),
                *("-D", str(self.replica.data), "-R", "-X", "stream", "-c", "fast"),
                "--no-sync",
            ],
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {result.stderr}")
        self.replica.start()

    def query(self, cluster: EmbeddedCluster, sql: str) -> Any:
        conn = psycopg2.connect(host=str(cluster.socket_dir), user="postgres", dbname="tenantd")
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql)
                row = cursor.fetchone() if cursor.description else None
                return None if row is None else row[0]
        finally:
            conn.close()

    def caught_up(self) -> bool:
        position = self.query(self.primary, "SELECT pg_current_wal_flush_lsn()::text")
        return bool(
            self.query(self.replica, f"SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn")
        )

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()


async def _migrate(url: str) -> None:
    db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
    try:
        await migrate(db)
    finally:
        await db.close()


async def until(check: Callable[[], Any], what: str, within: float = WITHIN) -> None:
    """Poll `check` (sync or async) until it is true; an error naming `what` past `within`."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not in {within:.0f} s: {what}")
        await asyncio.sleep(0.05)


def server_env(pair: Replicated, nats: Nats, root: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": pair.primary.url,
        "DATABASE_REPLICA_URLS": pair.replica.url,
        "TENANTD_BUS": "nats",
        "NATS_URL": nats.url,
        "SECRET_KEY": SECRET,
        "TENANTD_DATA_DIR": str(root / "data"),
        "TENANTD_ENV_FILE": "",  # not the host's /etc/tenantd/tenantd.env
        "PUBLIC_BASE_URL": ORIGIN,
        "COOKIE_SECURE": "false",
        "EMAIL_PROVIDER": "file",
        "EMAIL_FILE_DIR": str(root / "mail"),
        "LOG_LEVEL": "warning",
        "QUEUES_ENABLED": "true",
        "NOTIFICATIONS_SSE_ENABLED": "true",
        "RATE_LIMIT_ENABLED": "false",
        "TENANTD_SCHEDULER_ENABLED": "false",
        "TENANTD_EVENT_MODULES": "bench.events",
        "TENANTD_JOB_POLL_SECONDS": "0.05",
        "JOB_LEASE_SECONDS": "5",  # the killed instance's claimed jobs run again soon
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }


# --- the world and its clients --------------------------------------------------------------


@dataclass
class User:
    id: str
    email: str
    access: str = ""  # the reader's access token (its own sign-in)


@dataclass
class Failure:
    """A request that did not succeed at once: what, where, and whether that was allowed."""

    kind: str  # signin | refresh | read | send | stream
    instance: str
    reason: str
    on_killed: bool  # the request's instance had been killed
    recovered: bool = False  # a retry elsewhere succeeded


@dataclass
class World:
    root: Path
    env: dict[str, str]
    http: aiohttp.ClientSession
    token: str = ""
    users: list[User] = field(default_factory=list)
    slots: list[Server] = field(default_factory=list)  # the live instances, by slot
    started: list[Server] = field(default_factory=list)  # every instance ever started
    killed: set[int] = field(default_factory=set)  # id() of the killed servers
    failures: list[Failure] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    accepted: dict[int, tuple[str, str]] = field(default_factory=dict)  # n -> (user, id)
    warmups: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    budget: int = 0  # sends the load may start so far (the faults raise it)
    faults_done: bool = False
    load_done: bool = False

    def start(self, name: str) -> Server:
        server = Server(self.env, self.root, name)
        self.started.append(server)
        return server

    def server(self, slot: int) -> Server:
        """The instance of `slot`; a killed one is out of rotation (as a load balancer takes
        it out) until its replacement is ready."""
        for step in range(len(self.slots)):
            server = self.slots[(slot + step) % len(self.slots)]
            if id(server) not in self.killed:
                return server
        raise RuntimeError("no live instance")

    def failed(self, kind: str, server: Server, reason: str) -> Failure:
        failure = Failure(kind, server.url, reason, id(server) in self.killed)
        self.failures.append(failure)
        return failure


async def call(
    world: World, kind: str, slot: int, method: str, path: str, **kwargs: Any
) -> tuple[int, Any, dict[str, str]]:
    """One request, retried on the next instance until answered below 500: status, body and
    the cookies set. A failure is recorded with its instance (recovered once a retry works)."""
    failures: list[Failure] = []
    deadline = time.monotonic() + WITHIN
    while True:
        server = world.server(slot)
        try:
            async with world.http.request(
                method, server.url + path, timeout=aiohttp.ClientTimeout(total=30), **kwargs
            ) as response:
                body = await response.json(content_type=None)
                if response.status < 500:
                    for failure in failures:
                        failure.recovered = True
                    cookies = {k: v.value for k, v in response.cookies.items()}
                    return response.status, body, cookies
                failures.append(world.failed(kind, server, f"HTTP {response.status}"))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            failures.append(world.failed(kind, server, type(error).__name__))
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind} {path}: no instance answered in {WITHIN:.0f} s")
        slot += 1
        await asyncio.sleep(0.1)


def cookie(**values: str) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in values.items())}


async def sign_in(world: World, user: User, slot: int) -> dict[str, str] | None:
    status, body, cookies = await call(
        world,
        "signin",
        slot,
        "POST",
        "/api/v1/auth/login",
        json={"email": user.email, "password": PASSWORD},
        headers={"Origin": ORIGIN},
    )
    world.counts["signin"] += 1
    if status != 200:
        world.failed("signin", world.server(slot), f"refused {status}: {body}")
        return None
    return cookies


async def session_client(world: World, number: int) -> None:
    """Sign in, refresh (each on the next instance) and read the inbox, until the load ends."""
    slot = number
    while not world.load_done:
        user = world.users[number % len(world.users)]
        cookies = await sign_in(world, user, slot)
        if cookies is None:
            return
        for _ in range(5):
            await asyncio.sleep(0.2)  # a client's pace: the load stays bounded
            slot += 1
            status, body, fresh = await call(
                world,
                "refresh",
                slot,
                "POST",
                "/api/v1/auth/refresh",
                headers={"Origin": ORIGIN, **cookie(refresh_token=cookies["refresh_token"])},
            )
            world.counts["refresh"] += 1
            if status != 200 or "refresh_token" not in fresh:
                world.failed("refresh", world.server(slot), f"refused {status}: {body}")
                return
            cookies = fresh
            status, body, _ = await call(
                world,
                "read",
                slot,
                "GET",
                "/api/v1/notifications?limit=5",
                headers=cookie(auth_token=cookies["auth_token"]),
            )
            world.counts["read"] += 1
            if status != 200:
                world.failed("read", world.server(slot), f"refused {status}: {body}")
            if world.load_done:
                return


async def send(world: World, user: User, n: int, key: str) -> str:
    """One send with its Idempotency-Key, retried on the next instance until accepted."""
    status, body, _ = await call(
        world,
        "send",
        n,
        "POST",
        "/api/v1/notifications/send",
        json={"type": EVENT, "recipientUserId": user.id, "payload": {"n": n}},
        headers={"Authorization": f"Bearer {world.token}", "Idempotency-Key": key},
    )
    if status != 202:
        raise RuntimeError(f"send {n} refused: {status} {body}")
    return str(body["data"]["id"])


async def send_load(world: World, size: Size) -> None:
    """Sends started at `size.rate` per second, at most 16 in flight, within the budget the
    faults set (so a slow fault does not let the load run ahead), until every fault is done
    and the budget is spent."""
    slots = asyncio.Semaphore(16)
    tasks = []
    gap = 1 / size.rate

    async def one(n: int) -> None:
        async with slots:
            user = world.users[n % len(world.users)]
            world.accepted[n] = (user.id, await send(world, user, n, f"cluster-{n}"))

    n = 0
    while not (world.faults_done and n >= world.budget):
        if n >= world.budget:
            await asyncio.sleep(0.05)
            continue
        tasks.append(asyncio.create_task(one(n)))
        n += 1
        await asyncio.sleep(gap)
    await asyncio.gather(*tasks)


# --- SSE readers ----------------------------------------------------------------------------


@dataclass
class Reader:
    user: User
    slot: int
    ids: list[str] = field(default_factory=list)  # every id received, in order, repeats too
    last_id: str | None = None
    connects: int = 0
    refusals: list[str] = field(default_factory=list)
    resumed_after: list[str] = field(default_factory=list)  # each reconnection's Last-Event-ID

    async def run(self, world: World) -> None:
        """Read the stream; when it breaks, reconnect to the next instance with
        Last-Event-ID, as a browser's EventSource does."""
        while True:
            server = world.server(self.slot)
            headers = cookie(auth_token=self.user.access)
            if self.last_id is not None:
                headers["Last-Event-ID"] = self.last_id
                if self.connects:
                    self.resumed_after.append(self.last_id)
            try:
                async with world.http.get(
                    server.url + STREAM,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=90),
                ) as response:
                    if response.status != 200:
                        self.refusals.append(f"{server.url}: HTTP {response.status}")
                    else:
                        self.connects += 1
                        await self.read(response)
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.slot += 1
            await asyncio.sleep(0.2)  # EventSource's reconnection delay, not a guess

    async def read(self, response: aiohttp.ClientResponse) -> None:
        buffer = b""
        while True:
            chunk = await response.content.readany()
            if not chunk:
                return
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                lines = block.split(b"\n")
                ids = [line[3:].strip().decode() for line in lines if line.startswith(b"id:")]
                if ids and any(line.startswith(b"data:") for line in lines):
                    self.ids.append(ids[-1])
                    self.last_id = ids[-1]


async def readers_ready(world: World, readers: list[Reader]) -> None:
    """Every stream open, and each has received a first (warm-up) notification, so its
    subscription works and it holds a Last-Event-ID. A reader that has nothing after 10 s gets
    another warm-up (its first may have been published before it subscribed)."""
    await until(lambda: all(r.connects for r in readers), "every SSE stream open")
    sent_at: dict[str, float] = {}
    deadline = time.monotonic() + WITHIN
    while not all(r.ids for r in readers):
        for reader in readers:
            if not reader.ids and time.monotonic() - sent_at.get(reader.user.id, -1e9) > 10:
                sent_at[reader.user.id] = time.monotonic()
                key = f"warmup-{uuid.uuid4()}"
                world.warmups.append(await send(world, reader.user, -1, key))
        if time.monotonic() > deadline:
            raise RuntimeError("an SSE reader never received its warm-up notification")
        await asyncio.sleep(0.05)


# --- faults ---------------------------------------------------------------------------------


async def progress(world: World, fraction: float, size: Size) -> None:
    """Let `fraction` of the planned sends more than are accepted now start (and 16 beyond,
    so sends are in flight at the next fault); wait until that many more are accepted."""
    step = int(fraction * size.sends)
    target = len(world.accepted) + step
    world.budget = max(world.budget, target + 16)
    await until(lambda: len(world.accepted) >= target, f"{target} sends accepted")


async def faults(world: World, size: Size, nats: Nats, pair: Replicated) -> None:
    await progress(world, 0.2, size)
    victim = world.slots[0]
    world.killed.add(id(victim))
    victim.signal(signal.SIGKILL)
    await asyncio.to_thread(victim.process.wait, 30)
    killed = time.monotonic()
    world.budget += int(0.1 * size.sends)  # the load goes on while the instance restarts
    replacement = world.start("instance-0b")
    await replacement.ready(world.http, SERVE_WITHIN)
    world.slots[0] = replacement
    world.faults.append(
        f"kill -9 of instance 0 ({victim.url}); its replacement ready after"
        f" {time.monotonic() - killed:.1f} s"
    )

    await progress(world, 0.15, size)
    await nats.kill()
    down = time.monotonic()
    await nats.start()
    world.faults.append(f"nats-server killed and started again ({time.monotonic() - down:.1f} s)")

    await progress(world, 0.15, size)
    await asyncio.to_thread(pair.query, pair.replica, "SELECT pg_wal_replay_pause()")
    paused = time.monotonic()
    await progress(world, 0.15, size)
    state = await asyncio.to_thread(
        pair.query, pair.replica, "SELECT pg_get_wal_replay_pause_state()"
    )
    await asyncio.to_thread(pair.query, pair.replica, "SELECT pg_wal_replay_resume()")
    world.faults.append(
        f"replica replay paused for {time.monotonic() - paused:.1f} s (state: {state})"
    )
    world.budget = max(world.budget, size.sends)  # and the rest of the load after the faults
    world.faults_done = True


# --- checks ---------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    value: str
    ok: bool


@dataclass
class Result:
    checks: list[Check]
    faults: list[str]
    figures: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def check(self, name: str) -> Check:
        return next(check for check in self.checks if check.name == name)


async def check_deliveries(db: Any, world: World) -> list[Check]:
    """Wait (bounded) until every accepted send's rows are written and settled, then judge."""
    ids = [nid for _user, nid in world.accepted.values()] + world.warmups

    async def settled() -> bool:
        pending = await db.fetch_val(
            "SELECT (SELECT count(*) FROM notifications WHERE id = ANY(%(ids)s::uuid[]))"
            " <> %(n)s OR EXISTS (SELECT 1 FROM notification_deliveries"
            "  WHERE notification_id = ANY(%(ids)s::uuid[]) AND status = 'pending')",
            {"ids": ids, "n": len(set(ids))},
        )
        return not pending

    with contextlib.suppress(RuntimeError):
        await until(settled, "every accepted send's rows written and settled")
    rows = await db.fetch_all(
        "SELECT n.id::text AS id, d.channel, d.status FROM notifications n"
        " LEFT JOIN notification_deliveries d ON d.notification_id = n.id"
        " WHERE n.id = ANY(%(ids)s::uuid[])",
        {"ids": ids},
    )
    total = await db.fetch_val(
        "SELECT count(*) FROM notifications WHERE user_id = ANY(%(u)s::uuid[])"
        " AND event_type = %(t)s",
        {"u": [u.id for u in world.users], "t": EVENT},
    )
    return delivery_checks(len(world.accepted), ids, [dict(r) for r in rows], int(total))


def delivery_checks(
    accepted: int, ids: list[str], rows: list[dict[str, Any]], total: int
) -> list[Check]:
    """`rows`: (id, channel, status) of the accepted notifications and their deliveries;
    `total`: every notification of the event for the run's users."""
    channels: dict[str, collections.Counter[str]] = {i: collections.Counter() for i in ids}
    statuses: collections.Counter[str] = collections.Counter()
    for row in rows:
        if row["channel"] is not None:
            channels[row["id"]][row["channel"]] += 1
            statuses[f"{row['channel']}:{row['status']}"] += 1
    missing = sum(1 for i in ids if not channels[i])
    wrong = sum(1 for i in ids if channels[i] and dict(channels[i]) != CHANNELS)
    not_sent = sum(c for k, c in statuses.items() if not k.endswith(":sent"))
    extra = total - len(set(ids))
    return [
        Check("sends accepted", str(accepted), accepted > 0),
        Check("sends without their rows (lost)", str(missing), missing == 0),
        Check("sends with other than one row per channel", str(wrong), wrong == 0),
        Check("delivery rows not sent", f"{not_sent} ({dict(statuses)})", not_sent == 0),
        Check("notifications beyond the accepted (doubled)", str(extra), extra == 0),
    ]


def wanted_by_user(world: World) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = collections.defaultdict(set)
    for user_id, nid in world.accepted.values():
        wanted[user_id].add(nid)
    return wanted


async def check_streams(db: Any, world: World, readers: list[Reader]) -> list[Check]:
    """Wait (bounded) until every reader has every notification of its user, then judge."""
    wanted = wanted_by_user(world)
    with contextlib.suppress(RuntimeError):
        await until(
            lambda: all(wanted[r.user.id] <= set(r.ids) for r in readers),
            "every reader has every notification of its user",
        )
    checks = stream_checks(wanted, readers)
    missed = [(r, nid) for r in readers for nid in sorted(wanted[r.user.id] - set(r.ids))]
    if missed:
        checks.append(Check("sse missed, why", await explain_missed(db, missed), True))
    return checks


async def explain_missed(db: Any, missed: list[tuple[Reader, str]]) -> str:
    """For each missed notification: when it was created and committed against the
    Last-Event-IDs its reader resumed after (a replay returns what was created after them)."""
    ids = [nid for _r, nid in missed] + [i for r, _n in missed for i in r.resumed_after]
    rows = await db.fetch_all(
        "SELECT id::text AS id, created_at FROM notifications WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": ids},
    )
    created = {row["id"]: row["created_at"] for row in rows}
    parts = []
    for reader, nid in missed:
        later = [i for i in reader.resumed_after if i in created and created[i] > created[nid]]
        parts.append(
            f"{nid} created {created.get(nid)}; its reader resumed after"
            f" {len(reader.resumed_after)} id(s), {len(later)} of them created later"
        )
    return "; ".join(parts[:5])


def stream_checks(wanted: dict[str, set[str]], readers: list[Reader]) -> list[Check]:
    missing = sum(len(wanted[r.user.id] - set(r.ids)) for r in readers)
    repeats = sum(len(r.ids) - len(set(r.ids)) for r in readers)
    reconnects = sum(max(r.connects - 1, 0) for r in readers)
    refusals = [refusal for r in readers for refusal in r.refusals]
    delivered = sum(len(wanted[r.user.id] & set(r.ids)) for r in readers)
    return [
        Check("sse notifications received", f"{delivered} of {delivered + missing}", True),
        Check("sse notifications missed", str(missing), missing == 0),
        Check("sse ids received twice (not a failure)", str(repeats), True),
        Check("sse reconnections (Last-Event-ID)", str(reconnects), True),
        Check("sse streams refused", str(len(refusals)), not refusals),
    ]


def check_sessions(world: World) -> list[Check]:
    """Only the killed instance's in-flight requests may have failed, and each must have
    succeeded on its retry; no sign-in or refresh was refused."""
    counts = world.counts
    wrong = [f for f in world.failures if not (f.on_killed and f.recovered)]
    shown = "; ".join(f"{f.kind} on {f.instance}: {f.reason}" for f in wrong[:5])
    allowed = collections.Counter(f.kind for f in world.failures if f.on_killed and f.recovered)
    return [
        Check(
            "sign-ins / refreshes / inbox reads",
            f"{counts['signin']} / {counts['refresh']} / {counts['read']}",
            counts["signin"] > 0 and counts["refresh"] > 0,
        ),
        Check(
            "failed on the killed instance, then retried fine",
            ", ".join(f"{k} {v}" for k, v in sorted(allowed.items())) or "0",
            True,
        ),
        Check("refused or failed otherwise", f"{len(wrong)} {shown}".strip(), not wrong),
    ]


INVARIANTS = {
    "accounts without exactly one active owner": (
        "SELECT count(*) FROM accounts a WHERE a.deleted_at IS NULL AND (SELECT count(*)"
        " FROM memberships m WHERE m.account_id = a.id AND m.role = 'owner'"
        " AND m.revoked_at IS NULL) <> 1"
    ),
    "(account, user) with more than one active membership": (
        "SELECT count(*) FROM (SELECT 1 FROM memberships WHERE revoked_at IS NULL"
        " GROUP BY account_id, user_id HAVING count(*) > 1) twice"
    ),
    "accounts over their seat cap": (
        "SELECT count(*) FROM accounts a JOIN account_plans ap ON ap.account_id = a.id"
        " JOIN plans p ON p.code = ap.plan_code WHERE a.deleted_at IS NULL"
        " AND (SELECT count(*) FROM memberships m WHERE m.account_id = a.id"
        "  AND m.revoked_at IS NULL) > COALESCE(ap.seats, p.seats)"
    ),
}


async def check_invariants(db: Any) -> list[Check]:
    checks = []
    for name, sql in INVARIANTS.items():
        count = int(await db.fetch_val(sql))
        checks.append(Check(name, str(count), count == 0))
    accounts = int(await db.fetch_val("SELECT count(*) FROM accounts WHERE deleted_at IS NULL"))
    checks.append(Check("live accounts checked", str(accounts), accounts > 0))
    return checks


# --- the run --------------------------------------------------------------------------------


async def prepare(world: World, size: Size) -> Any:
    """The users (each with an account of its own), the API key; the database handle."""
    settings = load_settings(environ=world.env)
    db = await create_database(url_to_dsn(world.env["DATABASE_URL"]), minsize=1, maxsize=4)
    password_hash = await hash_password(PASSWORD)
    async with db.transaction() as conn:
        for number in range(size.users):
            email = f"cluster{number}-{uuid.uuid4().hex[:6]}@example.com"
            user_id = await identity_queries.insert_user(
                conn, email=email, first_name="Cluster", last_name=str(number)
            )
            assert user_id is not None
            await identity_queries.mark_email_verified(conn, user_id)
            await identity_queries.set_password(conn, user_id=user_id, password_hash=password_hash)
            await create_account(conn, settings, owner_id=user_id, name=f"Cluster {number}")
            world.users.append(User(str(user_id), email))
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="cluster", scopes="notifications:send"
        )
    world.token = created.token
    return db


async def drive(world: World, size: Size, nats: Nats, pair: Replicated) -> Result:
    started = time.monotonic()
    world.slots = [world.start(f"instance-{i}") for i in range(INSTANCES)]
    await asyncio.gather(*(s.ready(world.http, SERVE_WITHIN) for s in world.slots))
    db = await prepare(world, size)
    readers: list[Reader] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for number, user in enumerate(world.users):
            cookies = await sign_in(world, user, number)
            if cookies is None:
                raise RuntimeError(f"{user.email} could not sign in")
            user.access = cookies["auth_token"]
            readers.append(Reader(user, slot=number))
        tasks = [asyncio.create_task(r.run(world)) for r in readers]
        await readers_ready(world, readers)
        ready_s = time.monotonic() - started
        load_started = time.monotonic()
        sessions = [asyncio.create_task(session_client(world, i)) for i in range(size.sessions)]
        load = asyncio.create_task(send_load(world, size))
        try:
            await faults(world, size, nats, pair)
            await load
        finally:
            world.load_done = True
            await asyncio.gather(*sessions, return_exceptions=True)
            load.cancel()
        load_s = time.monotonic() - load_started
        checks = await check_deliveries(db, world)
        checks += await check_streams(db, world, readers)
        checks += check_sessions(world)
        checks += await check_invariants(db)
        with contextlib.suppress(RuntimeError):
            await until(lambda: pair.caught_up(), "the replica caught up")
        caught_up = await asyncio.to_thread(pair.caught_up)
        checks.append(Check("replica caught up after resume", str(caught_up), caught_up))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await db.close()
    figures = {
        "setup_s": round(ready_s, 1),
        "load_s": round(load_s, 1),
        "total_s": round(time.monotonic() - started, 1),
        "sends_per_s": round(len(world.accepted) / load_s, 1),
    }
    return Result(checks, world.faults, figures)


async def run_async(size: Size, root: Path, nats: Nats, pair: Replicated) -> Result:
    env = server_env(pair, nats, root)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as http:
        world = World(root, env, http)
        try:
            return await drive(world, size, nats, pair)
        finally:
            await asyncio.gather(*(server.stop() for server in world.started))
            await nats.kill()


def run(size: Size, root: Path) -> Result:
    """Build everything under `root` (made afresh), drive the load and the faults, check,
    stop everything. The result's checks say what held."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    pair = Replicated(root)
    nats = Nats(root)
    try:
        pair.build()
        asyncio.run(nats.start())
        return asyncio.run(run_async(size, root, nats, pair))
    finally:
        if nats.process is not None and nats.process.poll() is None:
            nats.process.kill()
        pair.stop()


def print_result(result: Result) -> None:
    print("| check | value | ok |")
    print("|---|---|---|")
    for check in result.checks:
        print(f"| {check.name} | {check.value} | {'yes' if check.ok else 'NO'} |")
    for fault in result.faults:
        print(f"- {fault}")
    print("- " + ", ".join(f"{k} {v}" for k, v in result.figures.items()))
    print("all checks hold" if result.ok else "FAILED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--dir", default=str(ROOT / "var" / "cluster"), help="made afresh")
    parser.add_argument("--json", default="", help="also write the result here")
    args = parser.parse_args()
    # SIGTERM as Ctrl-C: the servers, NATS and PostgreSQL are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(SIZES[args.size], Path(args.dir))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    print_result(result)
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
