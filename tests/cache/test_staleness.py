"""The staleness rule of every cache fed by the database (cache/invalidation.py): a cache
serves only while its LISTEN connection has confirmed a round trip within the bound, so a
connection that dies silently turns it off in time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg2.extensions

from tenantd.cache.invalidation import CHANNEL, STALENESS_SECONDS, live_while_confirmed
from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.pubsub import PubSubHub
from tests.factories import wait_until_heard
from tests.identity.test_principal_cache import principal


class FreezableProxy:
    """A TCP port in front of PostgreSQL that can fall silent both ways, as a network partition
    does: the sockets stay open and nothing passes, so no error ever reaches the client."""

    def __init__(self, dsn: str) -> None:
        self.params = psycopg2.extensions.parse_dsn(dsn)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen; return the DSN that goes through the proxy."""
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        params = {**self.params, "host": "127.0.0.1", "port": str(port)}
        return str(psycopg2.extensions.make_dsn(**params))

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host = self.params.get("host", "/var/run/postgresql")
        port = self.params.get("port", "5432")
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, int(port))

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._upstream()
        self.writers += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    async def close(self) -> None:
        self.thaw()
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_silently_dead_listener_stops_the_cache_within_the_bound(
    db: Database, factory: Any, migrated: str
) -> None:
    """SERVICE.md's staleness bound holds when the LISTEN connection dies without an error:
    from the moment nothing passes, the cache serves a stored entry for less than
    STALENESS_SECONDS, and after the partition it starts again from empty."""
    user = await factory.user()
    proxy = FreezableProxy(url_to_dsn(migrated))
    hub = PubSubHub(await proxy.start())
    await hub.start()
    cache = PrincipalCache()
    try:
        await hub.subscribe(CHANNEL, lambda _c, payload: cache.apply(payload), on_gap=cache.flush)
        cache.live = live_while_confirmed(hub)
        cache.enabled = True
        # The factory's rows announce themselves, and the relay may publish them only now
        # (a busy machine): hear them before storing, or `user:` drops the entry mid-test.
        await wait_until_heard(db, hub, CHANNEL)
        p = principal(user.id, user.account_id)
        cache.store_principal(p, cache.generation)
        assert cache.principal(p.jti) == p

        proxy.freeze()
        frozen_at = time.monotonic()
        # A revocation commits meanwhile: its NOTIFY never arrives.
        await db.execute(
            "UPDATE memberships SET revoked_at = now() WHERE user_id = %(u)s", {"u": user.id}
        )
        while True:
            looked_at = time.monotonic()
            if cache.principal(p.jti) is None:
                break
            # Whenever it still serves, the last confirmed round trip is within the bound.
            assert looked_at - frozen_at < STALENESS_SECONDS
            await asyncio.sleep(0.05)
        assert not cache.serving

        proxy.thaw()
        # The hub's round trip timed out, it reconnects, and the gap empties the cache.
        while not cache.serving:
            assert time.monotonic() - frozen_at < 60, "the listener never came back"
            await asyncio.sleep(0.05)
        assert hub.reconnects == 1
        assert cache.principal(p.jti) is None
    finally:
        await hub.close()
        await proxy.close()
