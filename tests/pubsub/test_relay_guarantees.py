"""What the relay guarantees beyond publishing after commit (issue 31): a durable channel's row
leaves `announcements` only once JetStream acknowledged it, so a process that dies while the
NATS server is down loses nothing; and a relay that cannot publish turns the caches off within
their staleness bound, as a bus that cannot deliver does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiopg
import pytest
from aiohttp import web

from bench.private_servers import PrivateServer
from tenantd.app.bus import RELAY
from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import STALENESS_SECONDS
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.relay import publishing
from tenantd.pubsub.nats_bus import NatsBus
from tests.helpers import eventually
from tests.pubsub.test_jetstream import nats_server
from tests.pubsub.test_relay import RELAY_LOCK, announce, holder, pending, run

__all__ = ["holder", "nats_server"]  # the fixtures, used here

DURABLE = "test_durable"


async def started(url: str) -> NatsBus:
    bus = NatsBus(url, durable={DURABLE})
    await bus.start()
    await eventually(lambda: bus.confirmed_within(5), within=30)  # the stream exists
    return bus


@pytest.mark.own_relays
async def test_a_durable_row_is_deleted_only_once_the_stream_acknowledged_it(
    db: Database, migrated: str, nats_server: PrivateServer
) -> None:
    """The NATS server is down when three durable rows commit; the process's relay tries,
    and stops (the process ends) before the server is back: the rows are still waiting.
    After the restart another process's relay publishes them and a JetStream subscriber
    hears each of them."""
    first = await started(nats_server.url)
    pool = await create_database(url_to_dsn(migrated), minsize=1, maxsize=2)
    try:
        await nats_server.stop()
        await eventually(lambda: not first.is_connected(), within=20)
        await announce(db, DURABLE, ["1", "2", "3"])
        async with publishing(
            pool, first.publish, acked=first.publish_acked, durable=first.durable
        ) as relay:
            relay.wake()
            await eventually(lambda: relay._failing)  # it tried: the stream did not answer
        await first.close()  # the process is gone before the server is back
        assert [p for c, p in await pending(db) if c == DURABLE] == ["1", "2", "3"]
    finally:
        await pool.close()
        await first.close()

    await nats_server.start()
    listener = await started(nats_server.url)
    heard: list[str] = []
    await listener.subscribe(DURABLE, lambda _c, payload: heard.append(payload))
    second = await started(nats_server.url)
    pool = await create_database(url_to_dsn(migrated), minsize=1, maxsize=2)
    try:
        async with publishing(
            pool, second.publish, acked=second.publish_acked, durable=second.durable
        ):
            await eventually(lambda: heard == ["1", "2", "3"], within=30)
            await eventually(lambda: none_waiting(db, DURABLE))
    finally:
        await pool.close()
        await second.close()
        await listener.close()
    assert heard == ["1", "2", "3"]


async def none_waiting(db: Database, channel: str) -> bool:
    """Whether no row of `channel` waits any more."""
    return not [c for c, _ in await pending(db) if c == channel]


@pytest.fixture(params=["postgres", pytest.param("nats", marks=pytest.mark.own_relays)])
def env(env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    """The app on PostgreSQL's bus, or on a private NATS server (then the test's own pool
    runs no relay: its SQL publisher would NOTIFY rows nobody on NATS hears)."""
    if request.param == "postgres":
        return env
    server: PrivateServer = request.getfixturevalue("nats_server")
    return {**env, "TENANTD_BUS": "nats", "NATS_URL": server.url}


async def test_a_relay_that_cannot_publish_turns_the_caches_off_within_the_bound(
    app: web.Application, db: Database, factory: Any, make_client: Any, holder: aiopg.Connection
) -> None:
    """Another process holds the relays' lock and hangs: no relay publishes. A token's
    revocation commits elsewhere (its NOTICE never reaches this process). The bus still
    answers its round trips, yet within STALENESS_SECONDS the cache stops serving and the
    request, read from the database, is refused; once the lock is released the revocation
    is published and the cache serves again."""
    cache = app[DOMAINS].identity.principal_cache
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    assert (await browser.get("/api/v1/users/me")).status == 200
    await eventually(lambda: none_waiting(db, "tenantd_cache"))  # the sign-in's are heard

    async def cached() -> bool:
        hits = cache.hits
        assert (await browser.get("/api/v1/users/me")).status == 200
        return cache.hits > hits

    await eventually(cached)  # served from the cache
    await run(holder, f"SELECT pg_advisory_lock({RELAY_LOCK})")
    try:
        committed_at = time.monotonic()
        await db.execute(
            "UPDATE users SET tokens_valid_after = now() WHERE id = %(u)s", {"u": user.id}
        )
        while True:
            looked_at = time.monotonic()
            status = (await browser.get("/api/v1/users/me")).status
            if status == 401:
                break
            assert status == 200
            # Whenever the cache still answers, the commit is younger than the bound.
            assert looked_at - committed_at < STALENESS_SECONDS
            await asyncio.sleep(0.05)
        assert not cache.serving
        assert ("tenantd_cache", f"user:{user.id}") in await pending(db)  # still waiting
    finally:
        await run(holder, f"SELECT pg_advisory_unlock({RELAY_LOCK})")
    await eventually(lambda: cache.serving, within=30)  # published, delivered: live again
    assert app[RELAY].confirmed_within(STALENESS_SECONDS)
    assert (await browser.get("/api/v1/users/me")).status == 401
