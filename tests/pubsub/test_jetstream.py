"""TENANTD_BUS=nats carries the channels that must not miss a message on JetStream: a
subscriber cut off from the server (behind a proxy this test cuts) or a server killed and
restarted gets, after it reconnects, what was published meanwhile, in order and without a gap
(no `on_gap`, no cache drop); the core channels still hear their gap."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from aiohttp import web

from bench.private_servers import PrivateServer, free_port
from tenantd.app.bus import DURABLE_CHANNELS
from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.pubsub import PUBSUB
from tenantd.pubsub.nats_bus import STREAM, NatsBus
from tests.helpers import ORIGIN, access_claims, eventually

DURABLE = "test_durable"
CORE = "test_core"


class Cutter:
    """A TCP proxy in front of a server: `cut()` drops every connection through it and
    refuses new ones until `mend()`; the server itself stays up."""

    def __init__(self, target_port: int):
        self.port = free_port()
        self.target_port = target_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def mend(self) -> None:
        self._server = await asyncio.start_server(self._join, "127.0.0.1", self.port)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        for pipe in list(self._pipes):
            pipe.cancel()

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.get_running_loop().create_task(self._copy(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _copy(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.close()
        self._writers.discard(sink)


@pytest.fixture
async def nats_server() -> AsyncIterator[PrivateServer]:
    async with PrivateServer.running("nats") as server:
        yield server


@pytest.fixture
async def cutter(nats_server: PrivateServer) -> AsyncIterator[Cutter]:
    proxy = Cutter(nats_server.port)
    await proxy.mend()
    try:
        yield proxy
    finally:
        await proxy.cut()


async def restart(server: PrivateServer, bus: NatsBus) -> None:
    """Kill the server (its stream is on disk) and start it again; `bus` reconnects."""
    await server.stop()
    await eventually(lambda: not bus.is_connected(), within=20)
    await server.start()
    await eventually(lambda: bus.confirmed_within(5), within=30)


class Heard:
    """What one subscriber heard: messages per channel, and gaps per channel."""

    def __init__(self) -> None:
        self.messages: dict[str, list[str]] = {}
        self.gaps: dict[str, int] = {}

    async def on(self, bus: NatsBus, channel: str) -> None:
        await bus.subscribe(
            channel,
            lambda c, payload: self.messages.setdefault(c, []).append(payload),
            on_gap=lambda: self.gaps.__setitem__(channel, self.gaps.get(channel, 0) + 1),
        )

    def of(self, channel: str) -> list[str]:
        return self.messages.get(channel, [])


async def test_a_subscriber_cut_off_or_a_restarted_server_resumes_from_the_stream(
    nats_server: PrivateServer, cutter: Cutter
) -> None:
    a = NatsBus(nats_server.url, durable={DURABLE})
    b = NatsBus(cutter.url, durable={DURABLE})
    await a.start()
    await b.start()
    try:
        heard = Heard()
        await heard.on(b, DURABLE)
        await heard.on(b, CORE)
        a.publish(DURABLE, "one")
        await eventually(lambda: heard.of(DURABLE) == ["one"])

        await cutter.cut()  # B alone is cut off; A and the server stay up
        await eventually(lambda: not b.is_connected(), within=20)
        a.publish(DURABLE, "two")
        a.publish(DURABLE, "three")
        await eventually(lambda: a.unacknowledged() == 0)  # both are in the stream
        assert heard.of(DURABLE) == ["one"]
        await cutter.mend()
        await eventually(lambda: heard.of(DURABLE) == ["one", "two", "three"], within=30)
        assert heard.gaps.get(CORE) == 1  # B did reconnect: the core channel heard its gap
        assert DURABLE not in heard.gaps  # the durable one missed nothing

        # The server restarts while B is cut off: B's consumer is gone with it, and what A
        # publishes now is in the stream before B is back. Only following from the last
        # sequence B saw brings it.
        await cutter.cut()
        await eventually(lambda: not b.is_connected(), within=20)
        await restart(nats_server, a)
        a.publish(DURABLE, "four")
        await eventually(lambda: a.unacknowledged() == 0)
        await cutter.mend()
        await eventually(lambda: heard.of(DURABLE)[-1:] == ["four"], within=30)
        assert heard.of(DURABLE) == ["one", "two", "three", "four"]  # once each, in order
        assert DURABLE not in heard.gaps
        await eventually(lambda: b.confirmed_within(5), within=20)
    finally:
        await a.close()
        await b.close()


async def test_a_stream_that_no_longer_holds_what_was_missed_is_a_gap(
    nats_server: PrivateServer, cutter: Cutter
) -> None:
    a = NatsBus(nats_server.url, durable={DURABLE}, stream_max_age=1.0)
    b = NatsBus(cutter.url, durable={DURABLE}, stream_max_age=1.0)
    await a.start()
    await b.start()
    try:
        heard = Heard()
        await heard.on(b, DURABLE)
        await cutter.cut()
        await eventually(lambda: not b.is_connected(), within=20)
        a.publish(DURABLE, "expired")
        await eventually(lambda: a.unacknowledged() == 0)
        await eventually(lambda: stream_holds_nothing(nats_server.url), within=20)
        await cutter.mend()
        await eventually(lambda: heard.gaps.get(DURABLE) == 1, within=30)
        assert heard.of(DURABLE) == []
    finally:
        await a.close()
        await b.close()


async def stream_holds_nothing(url: str) -> bool:
    nc = await nats.connect(url)
    try:
        state = (await nc.jetstream().stream_info(STREAM)).state
        return state.messages == 0 and state.last_seq > 0
    finally:
        await nc.close()


@pytest.fixture
def env(env: dict[str, str], nats_server: PrivateServer) -> dict[str, str]:
    return {**env, "TENANTD_BUS": "nats", "NATS_URL": nats_server.url}


@pytest.fixture
async def other(settings: Any, migrated: str, aiohttp_server: Any, cutter: Cutter) -> Any:
    """Instance B, on the same database, reaching the NATS server through the cutter."""
    bus = settings.bus.model_copy(update={"nats_url": cutter.url})
    return await aiohttp_server(create_app(settings.model_copy(update={"bus": bus}), migrated))


async def test_a_revocation_published_while_an_instance_is_cut_off_is_applied_after(
    app: web.Application, other: Any, make_client: Any, factory: Any, aiohttp_client: Any,
    cutter: Cutter, nats_server: PrivateServer,
) -> None:  # fmt: skip
    bus_b = other.app[PUBSUB]
    assert isinstance(bus_b, NatsBus) and bus_b.durable == DURABLE_CHANNELS
    cache_b = other.app[DOMAINS].identity.principal_cache
    on_b = await aiohttp_client(other, headers={"Origin": ORIGIN})
    leaving, staying = await factory.user(), await factory.user()
    tokens = {user.id: (await factory.cookies(user))["auth_token"] for user in (leaving, staying)}
    # What those writes announce reaches B first (published, then a round trip of B's that
    # began after it), so B caches after hearing it and only the logout can drop an entry.
    await eventually(lambda: nothing_waiting(app[DOMAINS].db))
    published = asyncio.get_running_loop().time()
    await eventually(
        lambda: bus_b.confirmed_within(asyncio.get_running_loop().time() - published), within=20
    )
    for token in tokens.values():
        on_b.session.cookie_jar.update_cookies({"auth_token": token})
        assert (await on_b.get("/api/v1/users/me")).status == 200
    jti = {user_id: access_claims(other.app, t).jti for user_id, t in tokens.items()}
    await eventually(lambda: all(cache_b.principal(j) is not None for j in jti.values()))

    await cutter.cut()
    await eventually(lambda: not bus_b.is_connected(), within=20)
    await restart(nats_server, app[PUBSUB])  # B's consumer is gone with the old server
    tab = await make_client(cookies={"auth_token": tokens[leaving.id]})
    assert (await tab.post("/api/v1/auth/logout")).status == 200
    # In the stream: the relay deletes a durable channel's row once the stream acknowledged it.
    await eventually(lambda: nothing_waiting(app[DOMAINS].db))
    before = bus_b.reconnects
    await cutter.mend()
    await eventually(lambda: bus_b.reconnects > before and cache_b.serving, within=30)
    # The revocation came from the stream: the other user's entry was not dropped with it
    # (a gap would have flushed the whole cache).
    await eventually(lambda: cache_b.principal(jti[leaving.id]) is None, within=10)
    assert cache_b.principal(jti[staying.id]) is not None
    on_b.session.cookie_jar.update_cookies({"auth_token": tokens[leaving.id]})
    assert (await on_b.get("/api/v1/users/me")).status == 401


async def nothing_waiting(db: Any) -> bool:
    return not await db.fetch_val("SELECT count(*) FROM announcements")


def test_the_channels_that_must_not_miss_a_message_are_durable() -> None:
    assert {"tenantd_cache", "tenantd_keys", "tenantd_event_types"} == DURABLE_CHANNELS
