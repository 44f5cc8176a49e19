"""TENANTD_BUS=nats and =redis against real servers, each test's own (on a shared server,
parallel test runs would hear each other's channels and share one JetStream stream): two
in-process instances on one database, no connection LISTENs; a send on A reaches an SSE
reader on B, a logout on A ends the session's token on B, and with the bus down (the server
killed and restarted) a send is accepted, delivery catches up and every subscriber hears its
gap."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from bench.private_servers import PrivateServer
from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.db.relay import Relay
from tenantd.notifications import send
from tenantd.notifications.channels.sse.feed import FEED_KEY
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.pubsub import PUBSUB
from tenantd.pubsub.nats_bus import NatsBus
from tenantd.pubsub.redis_bus import RedisBus, sharded_pubsub
from tests.helpers import ORIGIN, access_claims, eventually
from tests.notifications.sse_client import open_stream

BUSES = ["nats", "redis"]


@pytest.fixture(params=BUSES)
def bus_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
async def private_bus(bus_kind: str) -> AsyncIterator[PrivateServer]:
    async with PrivateServer.running(bus_kind) as server:
        yield server


@pytest.fixture
def env(env: dict[str, str], private_bus: PrivateServer) -> dict[str, str]:
    url = "NATS_URL" if private_bus.kind == "nats" else "REDIS_URL"
    return {**env, "TENANTD_BUS": private_bus.kind, url: private_bus.url}


@pytest.fixture
async def other(settings: Any, migrated: str, aiohttp_server: Any) -> Any:
    """Instance B: another app on the same database and bus."""
    return await aiohttp_server(create_app(settings, migrated))


async def ping(services: Notifications, user_id: uuid.UUID, n: int = 1) -> uuid.UUID:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": n})
    assert outcome.notification_id is not None  # accepted: it is in the database
    return outcome.notification_id


def listening(app: web.Application, user_id: uuid.UUID) -> bool:
    return f"notifications:user:{user_id}" in app[FEED_KEY].hub.channels


async def listen_connections(db: Any) -> int:
    count: int = await db.fetch_val(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
    )
    return count


async def reader_on(server: Any, aiohttp_client: Any, cookies: dict[str, str]) -> Any:
    client = await aiohttp_client(server, headers={"Origin": ORIGIN})
    client.session.cookie_jar.update_cookies(cookies)
    return await open_stream(client)


async def test_a_send_on_a_reaches_an_sse_reader_on_b(
    app: web.Application, other: Any, aiohttp_client: Any, factory: Any, db: Any, bus_kind: str
) -> None:
    expected = NatsBus if bus_kind == "nats" else RedisBus
    assert isinstance(app[PUBSUB], expected) and isinstance(other.app[PUBSUB], expected)
    user = await factory.user()
    on_b = await reader_on(other, aiohttp_client, await factory.cookies(user))
    await eventually(lambda: listening(other.app, user.id))
    sent = await ping(notifications_of(app), user.id, 1)
    event = await on_b.next_event()
    assert event is not None and event["id"] == str(sent)
    assert await listen_connections(db) == 0  # with nats or redis nothing LISTENs


async def test_a_logout_on_a_ends_the_sessions_token_on_b(
    make_client: Any, factory: Any, other: Any, aiohttp_client: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    on_b = await aiohttp_client(other, headers={"Origin": ORIGIN})
    on_b.session.cookie_jar.update_cookies({"auth_token": cookies["auth_token"]})
    cache_b = other.app[DOMAINS].identity.principal_cache
    jti = access_claims(other.app, cookies["auth_token"]).jti

    async def cached() -> bool:
        assert (await on_b.get("/api/v1/users/me")).status == 200
        return cache_b.principal(jti) is not None

    await eventually(cached)
    tab = await make_client(cookies=cookies)
    assert (await tab.post("/api/v1/auth/logout")).status == 200
    # Only the bus can tell B: the cache is confirmed live all along, so it would serve on.
    await eventually(lambda: cache_b.principal(jti) is None, within=10)
    assert (await on_b.get("/api/v1/users/me")).status == 401


async def test_the_bus_down_a_send_is_accepted_and_delivery_catches_up(
    private_bus: PrivateServer,
    app: web.Application,
    other: Any,
    aiohttp_client: Any,
    factory: Any,
) -> None:
    bus_b = other.app[PUBSUB]
    assert bus_b.confirmed_within(5)
    gaps = asyncio.Event()
    watch = await bus_b.subscribe("test:gap", lambda _c, _p: None, on_gap=gaps.set)
    user = await factory.user()
    on_b = await reader_on(other, aiohttp_client, await factory.cookies(user))
    await eventually(lambda: listening(other.app, user.id))
    before = await ping(notifications_of(app), user.id, 1)
    assert (await on_b.next_event() or {}).get("id") == str(before)

    await private_bus.stop()
    await eventually(lambda: not bus_b.confirmed_within(60), within=20)
    during = await ping(notifications_of(app), user.id, 2)  # accepted while the bus is down
    await private_bus.start()
    async with asyncio.timeout(30):
        await gaps.wait()  # B reconnected and told every subscriber
    event = await on_b.next_event()  # caught up from PostgreSQL by the stream's last id
    assert event is not None and event["id"] == str(during)
    await eventually(lambda: app[PUBSUB].confirmed_within(5))
    after = await ping(notifications_of(app), user.id, 3)
    event = await on_b.next_event()
    assert event is not None and event["id"] == str(after)
    await bus_b.unsubscribe(watch)


@pytest.mark.own_relays
async def test_each_cache_announcement_reaches_the_bus_once_through_the_relay(
    db: Database,
) -> None:
    """With nats or redis the relay hands each announced row to the bus (trigger notices are
    only applied in-process now), so the bus hears every cache announcement once, in order,
    and a statement announcing more than the 50 notices psycopg2 keeps loses none."""
    sent: list[tuple[str, str]] = []
    family, users = uuid.uuid4(), [uuid.uuid4() for _ in range(60)]
    await db.execute("DELETE FROM announcements")  # what emptying the tables announced
    await db.execute("SELECT tenantd_cache_announce('session', %(f)s)", {"f": family})
    await db.execute(
        "SELECT tenantd_cache_announce('user', u) FROM unnest(%(u)s::uuid[]) AS u", {"u": users}
    )
    relay = Relay(db, lambda channel, payload: sent.append((channel, payload)))
    assert await relay.publish_pending() == 61
    assert sent == [("tenantd_cache", f"session:{family}")] + [
        ("tenantd_cache", f"user:{user}") for user in users
    ]
    assert await relay.publish_pending() == 0  # published once


def test_sharded_pubsub_from_redis_7() -> None:
    assert sharded_pubsub("7.0.15") and not sharded_pubsub("6.2.14")
    assert not sharded_pubsub("")
