"""Publish after commit (issue 31 part 1): no write transaction runs NOTIFY; what it announces
is a row of `announcements` that a relay publishes after commit, in order per channel, at
least once, also when a relay dies and another process's sweep takes over."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiopg
import pytest
from aiohttp import web

from tenantd.apikeys import service as apikeys
from tenantd.app.bundle import Domains
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.relay import LOCK, Relay, publishing
from tenantd.identity.keys import service as keys
from tenantd.notifications import send
from tenantd.pubsub.queries import quote_channel
from tenantd.settings import Settings
from tests.apikeys.helpers import new_key
from tests.helpers import eventually
from tests.identity.keyhelpers import sign_in
from tests.notifications.support import EVENT_MODULE
from tests.notifications.test_declared_events import TYPES, definition

ROOT = Path(__file__).resolve().parents[2]
RELAY_LOCK = "735414, 1"  # the advisory lock every publisher takes (sql/functions/announcements)
SENTINEL = "relay-test-sentinel"

# The one place in tenantd/ that may NOTIFY: the PostgreSQL bus's own `publish`, on its
# listening connection, which never writes (nothing calls it with TENANTD_BUS=postgres).
NOTIFY_ALLOWED = {"tenantd/pubsub/queries.py"}
NOTIFYING = re.compile(r"\bpg_notify\s*\(|^\s*NOTIFY\s", re.IGNORECASE | re.MULTILINE)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "TENANTD_EVENT_MODULES": EVENT_MODULE, "NOTIFICATIONS_SSE_ENABLED": "true"}


class Listener:
    """A LISTEN connection of the test's own: every notification with its sender's pid."""

    def __init__(self, conn: aiopg.Connection):
        self.conn = conn
        self.heard: list[tuple[str, str]] = []

    async def listen(self, *channels: str) -> None:
        async with self.conn.cursor() as cur:
            for channel in channels:
                await cur.execute(f"LISTEN {quote_channel(channel)}")

    async def until(self, channel: str, payload: str, within: float = 30.0) -> None:
        """Take notifications until (channel, payload) arrives."""
        async with asyncio.timeout(within):
            while (channel, payload) not in self.heard:
                message = await self.conn.notifies.get()
                self.heard.append((message.channel, message.payload))

    async def count(self, channel: str, n: int, within: float = 30.0) -> list[str]:
        async with asyncio.timeout(within):
            while sum(1 for c, _ in self.heard if c == channel) < n:
                message = await self.conn.notifies.get()
                self.heard.append((message.channel, message.payload))
        return [p for c, p in self.heard if c == channel]


@pytest.fixture
async def listener(migrated: str) -> AsyncIterator[Listener]:
    conn = await aiopg.connect(url_to_dsn(migrated), enable_hstore=False)
    try:
        yield Listener(conn)
    finally:
        await conn.close()


@pytest.fixture
async def holder(migrated: str) -> AsyncIterator[aiopg.Connection]:
    """A connection of the test's own that writes nothing (it may hold the relays' lock)."""
    conn = await aiopg.connect(url_to_dsn(migrated), enable_hstore=False)
    try:
        yield conn
    finally:
        await conn.close()


async def run(conn: aiopg.Connection, sql: str) -> Any:
    async with conn.cursor() as cur:
        await cur.execute(sql)
        return await cur.fetchone() if cur.description else None


async def announce(db: Database, channel: str, payloads: list[str]) -> None:
    """One committed transaction per payload, one after another (their order is defined)."""
    for payload in payloads:
        async with db.transaction() as conn:
            await conn.execute(
                "SELECT tenantd_announce(%(c)s, %(p)s)", {"c": channel, "p": payload}
            )


async def pending(db: Database) -> list[tuple[str, str]]:
    rows = await db.fetch_all("SELECT channel, payload FROM announcements ORDER BY id")
    return [(r["channel"], r["payload"]) for r in rows]


# --- where pg_notify may be called -----------------------------------------------------


async def test_only_the_publisher_function_calls_pg_notify(db: Database) -> None:
    rows = await db.fetch_all(
        "SELECT p.proname, p.prosrc FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"
    )
    notifying = sorted(r["proname"] for r in rows if NOTIFYING.search(r["prosrc"]))
    assert notifying == ["tenantd_publish_announcements"]
    # The functions that announced with pg_notify still announce, as rows.
    source = {r["proname"]: r["prosrc"] for r in rows}
    for name in (
        "tenantd_cache_announce",
        "tenantd_cache_plans",
        "tenantd_cache_announce_inboxes",
        "tenantd_announce_changed",
    ):
        assert "tenantd_announce(" in source[name], name
    assert "INSERT INTO announcements" in source["tenantd_notification_dispatch_batch"]


def _statements(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings (prose may say NOTIFY)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_no_code_in_tenantd_notifies_outside_the_relay() -> None:
    found = {
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tenantd").rglob("*.py"))
        if any(NOTIFYING.search(text) for text in _statements(path))
    }
    assert found == NOTIFY_ALLOWED
    # The relay reaches pg_notify only through the publisher function.
    assert "tenantd_publish_announcements" in (ROOT / "tenantd/db/relay.py").read_text()


def test_the_scan_would_see_a_notify() -> None:
    assert NOTIFYING.search("SELECT pg_notify(%s, %s)")
    assert NOTIFYING.search("notify tenantd_cache, 'all'")
    assert not NOTIFYING.search("the trigger NOTIFYs tenantd_keys")


# --- the publisher's commit ------------------------------------------------------------


@pytest.mark.parametrize(
    "publisher",
    ["SELECT tenantd_publish_announcements()", LOCK],
    ids=["postgres", "bus"],
)
async def test_a_publishing_transaction_commits_without_waiting_for_the_wal_flush(
    db: Database, publisher: str
) -> None:
    """Its only write is the deletion of rows it published (lost in a crash: published again),
    so its commit skips the flush; the setting ends with it. The test clusters run with
    synchronous_commit off, so the session turns it on first."""
    async with db.connection() as conn:
        await conn.execute("SET synchronous_commit = on")
        async with conn.transaction():
            await conn.execute(publisher)
            assert await conn.fetch_val("SHOW synchronous_commit") == "off"
        assert await conn.fetch_val("SHOW synchronous_commit") == "on"
        await conn.execute("RESET synchronous_commit")


# --- no write transaction notifies -----------------------------------------------------


async def test_no_write_path_notifies_inside_its_transaction(
    app: web.Application,
    services: Domains,
    settings: Settings,
    make_client: Any,
    factory: Any,
    db: Database,
    listener: Listener,
    holder: aiopg.Connection,
) -> None:
    """With every relay held off (the test holds their advisory lock), the main write paths
    run; a LISTEN connection then hears nothing before a sentinel NOTIFYed after them (the
    server delivers notifications in commit order), so none of their transactions notified.
    Their announcements wait as rows, and once the lock is released the app's relay
    publishes every one of them."""
    user = await factory.user()
    topic = f"notifications:user:{user.id}"
    manager = await new_key(db, "notifications:manage")
    doomed = await new_key(db, "events:read", name="doomed")
    await run(holder, f"SELECT pg_advisory_lock({RELAY_LOCK})")
    try:
        # What the set-up announced is published now (the same session may take the lock
        # again), before the listener starts: it hears only what comes after.
        await run(holder, "SELECT tenantd_publish_announcements()")
        await listener.listen(
            "tenantd_cache", "tenantd_keys", "tenantd_event_types", topic, SENTINEL
        )
        browser = await make_client()
        await sign_in(browser, user)  # a session
        token = await sign_in(browser, user)
        revoked = await browser.post(
            "/api/v1/auth/logout", headers={"Cookie": f"auth_token={token}"}
        )
        assert revoked.status == 200  # the session's revocation
        async with services.db.transaction() as conn:
            rotated = await keys.rotate(conn, settings)  # a signing key published
        sent = await send(
            services.notifications,
            "ping.simple",
            recipient_user_id=user.id,
            payload={"n": 1},
        )
        assert sent.notification_id is not None  # an inbox and an SSE announcement
        put = await browser.put(
            f"{TYPES}/relay.checked",
            json=definition(),
            headers={"Authorization": f"Bearer {manager.token}"},
        )
        assert put.status in (200, 201), await put.text()  # an event type defined
        async with services.db.transaction() as conn:
            assert await apikeys.revoke_key(conn, doomed.id)  # an API key revoked
        await run(holder, f"SELECT pg_notify('{SENTINEL}', 'after')")
        await listener.until(SENTINEL, "after")
        assert listener.heard == [(SENTINEL, "after")]  # nothing any write transaction sent
        waiting = await pending(db)
        expected = {
            ("tenantd_keys", ""),
            ("tenantd_event_types", ""),
            (topic, str(sent.notification_id)),
            ("tenantd_cache", f"inbox:{user.id}"),
            ("tenantd_cache", f"apikey:{doomed.id}"),
        }
        assert expected <= set(waiting), waiting
        sessions = [p for c, p in waiting if c == "tenantd_cache" and p.startswith("session:")]
        assert sessions, waiting
        assert rotated["kid"]
    finally:
        await run(holder, f"SELECT pg_advisory_unlock({RELAY_LOCK})")
    for channel, payload in waiting:  # the app's relay publishes them, in the order written
        await listener.until(channel, payload)
    # In the order written (PostgreSQL folds a repeated message of one transaction into one,
    # so compare where each message was first written and first heard).
    heard = [m for m in listener.heard if m[0] != SENTINEL]
    assert list(dict.fromkeys(m for m in heard if m in waiting)) == list(dict.fromkeys(waiting))
    await eventually(lambda: _empty(db))


async def _empty(db: Database) -> bool:
    return await db.fetch_val("SELECT count(*) FROM announcements") == 0


# --- order per channel, at least once --------------------------------------------------


CHANNELS = [f"order-test:{n}" for n in range(4)]
PER_CHANNEL = 40


async def relay_pools(migrated: str, n: int) -> list[Database]:
    """One pool per simulated process."""
    return [await create_database(url_to_dsn(migrated), minsize=1, maxsize=2) for _ in range(n)]


@pytest.mark.own_relays
async def test_two_processes_relays_publish_each_channel_in_order_exactly_once(
    db: Database, migrated: str, listener: Listener, holder: aiopg.Connection
) -> None:
    await listener.listen(*CHANNELS, SENTINEL)
    before = len(await pending(db))  # emptying the tables announced (event_definitions)
    pools = await relay_pools(migrated, 2)
    relays = [Relay(pools[0], batch=7, sweep_seconds=0.05), Relay(pools[1], batch=5)]
    tasks = [asyncio.create_task(relay.run()) for relay in relays]
    try:

        async def writer(channel: str) -> None:
            for n in range(PER_CHANNEL):
                await announce(db, channel, [str(n)])
                relays[n % 2].wake()  # each "process" woken after some of the commits

        await asyncio.gather(*(writer(channel) for channel in CHANNELS))
        for channel in CHANNELS:
            assert await listener.count(channel, PER_CHANNEL) == [
                str(n) for n in range(PER_CHANNEL)
            ]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pool in pools:
            await pool.close()
    assert await _empty(db)
    assert relays[0].published + relays[1].published == before + len(CHANNELS) * PER_CHANNEL
    await run(holder, f"SELECT pg_notify('{SENTINEL}', 'end')")  # after every relay's commit
    await listener.until(SENTINEL, "end")
    assert sorted(listener.heard) == sorted(
        [(c, str(n)) for c in CHANNELS for n in range(PER_CHANNEL)] + [(SENTINEL, "end")]
    )


@pytest.mark.own_relays
async def test_bus_relays_of_two_processes_keep_each_channels_order(
    db: Database, migrated: str
) -> None:
    """With TENANTD_BUS=nats or redis the relay hands rows to the bus's publish: under the
    same lock, so the messages leave in the order written, per channel."""
    published: list[tuple[str, str]] = []
    pools = await relay_pools(migrated, 2)
    relays = [
        Relay(pool, lambda c, p: published.append((c, p)), batch=3, sweep_seconds=0.02)
        for pool in pools
    ]
    tasks = [asyncio.create_task(relay.run()) for relay in relays]
    try:
        await asyncio.gather(
            *(announce(db, c, [str(n) for n in range(PER_CHANNEL)]) for c in CHANNELS)
        )
        total = len(CHANNELS) * PER_CHANNEL
        await eventually(lambda: sum(c in CHANNELS for c, _ in published) >= total)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pool in pools:
            await pool.close()
    for channel in CHANNELS:
        assert [p for c, p in published if c == channel] == [str(n) for n in range(PER_CHANNEL)]


@pytest.mark.own_relays
async def test_a_relay_that_dies_mid_batch_leaves_its_rows_to_another_processs_sweep(
    db: Database, migrated: str
) -> None:
    """Bus mode: a relay handed three rows to the bus and died before its delete committed.
    Another process's relay, never woken, publishes all of them at its sweep: the three are
    heard twice (at least once), and the channel still hears them in order."""
    await announce(db, "crash-test", [str(n) for n in range(10)])
    first: list[str] = []

    def dying(channel: str, payload: str) -> None:
        if channel != "crash-test":
            return  # what emptying the tables announced
        if len(first) == 3:
            raise RuntimeError("the process died here")
        first.append(payload)

    pools = await relay_pools(migrated, 2)
    try:
        with pytest.raises(RuntimeError):
            await Relay(pools[0], dying).publish_pending()
        assert first == ["0", "1", "2"]
        assert len([m for m in await pending(db) if m[0] == "crash-test"]) == 10  # none deleted
        second: list[str] = []
        sweeper = Relay(
            pools[1],
            lambda c, p: second.append(p) if c == "crash-test" else None,
            sweep_seconds=0.05,
        )
        task = asyncio.create_task(sweeper.run())
        try:
            # Heard is not yet deleted: wait for the sweep's delete to commit before stopping it.
            await eventually(lambda: _empty(db))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        for pool in pools:
            await pool.close()
    assert second == [str(n) for n in range(10)]


@pytest.mark.own_relays
async def test_a_publisher_killed_before_its_commit_loses_nothing(
    db: Database, migrated: str, listener: Listener, holder: aiopg.Connection
) -> None:
    """PostgreSQL mode: a relay's backend is terminated while it publishes (it waits for the
    lock the test holds). Nothing is heard from it (NOTIFY is delivered at commit, and its
    transaction never commits); another process's sweep publishes every row, in order."""
    await listener.listen("kill-test")
    await announce(db, "kill-test", [str(n) for n in range(6)])
    pools = await relay_pools(migrated, 2)
    try:
        await run(holder, f"SELECT pg_advisory_lock({RELAY_LOCK})")
        doomed = asyncio.create_task(Relay(pools[0]).publish_pending())
        waiting = await eventually(
            lambda: db.fetch_val(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
        )
        await db.execute("SELECT pg_terminate_backend(%(p)s)", {"p": waiting})
        with pytest.raises(Exception):  # noqa: B017 - the connection's end, however reported
            await doomed
        sweeper = Relay(pools[1], sweep_seconds=0.05)
        task = asyncio.create_task(sweeper.run())
        await run(holder, f"SELECT pg_advisory_unlock({RELAY_LOCK})")
        try:
            assert await listener.count("kill-test", 6) == [str(n) for n in range(6)]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        for pool in pools:
            await pool.close()
    assert await _empty(db)
    assert listener.heard == [("kill-test", str(n)) for n in range(6)]


@pytest.mark.own_relays
async def test_a_commit_wakes_its_processs_relay_at_once(db: Database) -> None:
    """Conn.announced and a trigger's NOTICE wake the relay after commit, not before."""
    await db.execute("DELETE FROM announcements")  # what emptying the tables announced
    relay = Relay(db, sweep_seconds=3600.0)
    db.on_announced = relay.wake
    try:
        async with db.transaction() as conn:
            await conn.execute("SELECT tenantd_announce('wake-test', 'x')")
            conn.announced()
            assert not relay._woken.is_set()  # not before the commit
        assert relay._woken.is_set()
        relay._woken.clear()
        await db.execute("UPDATE plans SET name = name")  # a trigger's NOTICE, autocommitted
        assert relay._woken.is_set()
        relay._woken.clear()
        with pytest.raises(LookupError):
            async with db.transaction() as conn:
                await conn.execute("SELECT tenantd_announce('wake-test', 'y')")
                conn.announced()
                raise LookupError("rolled back")
        assert not relay._woken.is_set()  # a rollback announced nothing
        assert await pending(db) == [("wake-test", "x"), ("tenantd_cache", "all")]
        assert await relay.publish_pending() == 2
    finally:
        db.on_announced = None


@pytest.mark.own_relays
async def test_a_busy_pool_does_not_hold_back_what_its_commits_announced(
    migrated: str, listener: Listener, holder: aiopg.Connection
) -> None:
    """The relay publishes on a connection of its own: with every connection of the
    process's pool checked out (a burst of requests), an announcement still goes out."""
    await listener.listen("busy-pool")
    db = await create_database(url_to_dsn(migrated), minsize=1, maxsize=2)
    try:
        async with publishing(db) as relay, contextlib.AsyncExitStack() as held:
            for _ in range(2):  # the whole pool, held until the announcement is heard
                await held.enter_async_context(db.connection())
            await run(holder, "SELECT tenantd_announce('busy-pool', 'heard')")  # committed
            relay.wake()
            await listener.until("busy-pool", "heard")
    finally:
        await db.close()
