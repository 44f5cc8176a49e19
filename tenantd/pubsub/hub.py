"""PostgreSQL LISTEN/NOTIFY hub: one dedicated listening connection per process.

Every subscriber of the process shares the one connection; a channel is LISTENed while at
least one subscriber wants it. When the connection fails, the hub reconnects with backoff,
LISTENs every channel again and tells the subscribers that messages may have been missed
(their `on_gap`), so they can catch up from storage.

A connection can also die silently (a network partition: no error, no message, ever). So the
hub makes a cheap round trip on it every second; `confirmed_within(s)` says whether one that
began less than `s` seconds ago came back (every NOTIFY committed before it began has then
arrived), and a round trip unanswered for PING_TIMEOUT_SECONDS drops the connection.

Channel names are quoted identifiers (`notifications:user:<uuid>` has a colon) and must
stay within PostgreSQL's 63-byte identifier limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiopg
import psycopg2

from tenantd.pubsub import queries
from tenantd.pubsub.bus import PUBSUB as PUBSUB
from tenantd.pubsub.core import BusCore
from tenantd.pubsub.queries import MAX_CHANNEL_BYTES as MAX_CHANNEL_BYTES
from tenantd.pubsub.queries import quote_channel as quote_channel

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0  # a connect (and its LISTENs) into a partition gives up
RECONNECT_MAX_SECONDS = 10.0


class PubSubHub(BusCore):
    reconnect_max_seconds = RECONNECT_MAX_SECONDS

    def __init__(self, dsn: str, **clock: float):  # ping_interval, ping_timeout: BusCore's
        super().__init__(**clock)
        self._dsn = dsn
        self._conn: aiopg.Connection | None = None
        self._listening: set[str] = set()  # what the current connection LISTENs to
        self._next_sync: asyncio.Future[None] | None = None

    async def start(self) -> None:
        began = time.monotonic()
        self._conn = await aiopg.connect(self._dsn, enable_hstore=False)
        self._confirmed_at = began
        self._start_loops(self._read_loop(), self._health_loop())

    async def close(self) -> None:
        self._closing = True
        if self._next_sync is not None and not self._next_sync.done():
            self._next_sync.set_result(None)  # its task may be cancelled before it began
        await self._stop_tasks()
        if self._conn is not None and not self._conn.closed:
            await self._conn.close()
        self._conn = None

    def _check_channel(self, channel: str) -> None:
        quote_channel(channel)  # a LISTEN-able identifier, or ValueError

    async def _channel_added(self, channel: str, *, first: bool) -> None:
        if first or channel not in self._listening:
            await self._sync_channels()

    async def _channel_removed(self, channel: str) -> None:
        await self._sync_channels()

    async def _sync_channels(self) -> None:
        """Make the connection LISTEN to exactly the subscribed channels. Callers that arrive
        while a sync waits for the connection share it: 10,000 streams attaching at once cost
        a few round trips (one multi-statement LISTEN each), not 10,000 in a row."""
        pending = self._next_sync
        if pending is None:
            pending = self._next_sync = asyncio.get_running_loop().create_future()
            self._spawn(self._run_sync(pending))
        await asyncio.shield(pending)

    async def _run_sync(self, done: asyncio.Future[None]) -> None:
        try:
            async with self._lock:
                if self._next_sync is done:
                    self._next_sync = None  # later changes need a sync of their own
                await self._apply_channels()
        finally:
            if not done.done():
                done.set_result(None)

    async def _apply_channels(self) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            return  # the reconnect LISTENs every channel again
        wanted = set(self._channels)
        listen = wanted - self._listening
        unlisten = self._listening - wanted
        if not listen and not unlisten:
            return
        sql = queries.listen_statement(listen, unlisten)
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql)
        except (psycopg2.Error, OSError) as error:
            log.warning("pubsub command failed; reconnecting", extra={"error": str(error)})
            await self._drop()
            return
        self._listening = (self._listening | listen) - unlisten

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._listening = set()
        if conn is not None and not conn.closed:
            with contextlib.suppress(Exception):
                await conn.close()

    def publish(self, channel: str, payload: str) -> None:
        """NOTIFY on the listening connection, in a task (dropped while disconnected)."""
        if self._closing:
            return
        self._spawn(self._notify(channel, payload))

    async def publish_acked(self, channel: str, payload: str) -> None:
        """Bus.publish_acked: LISTEN/NOTIFY holds nothing; the same as `publish`."""
        self.publish(channel, payload)

    async def _notify(self, channel: str, payload: str) -> None:
        async with self._lock:
            conn = self._conn
            if conn is None or conn.closed:
                return
            try:
                async with conn.cursor() as cur:
                    await cur.execute(queries.NOTIFY, (channel, payload))
            except (psycopg2.Error, OSError) as error:
                log.warning("pubsub publish failed", extra={"error": str(error)})

    def _connection(self) -> aiopg.Connection | None:
        conn = self._conn
        return None if conn is None or conn.closed else conn

    async def _receive(self, conn: aiopg.Connection) -> Any:
        return await conn.notifies.get()

    def _handle(self, message: Any) -> None:
        self._dispatch(message.channel, message.payload)

    async def _connect(self) -> bool:
        """One connect that LISTENs every channel; False when it failed."""
        began = time.monotonic()
        conn: aiopg.Connection | None = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                conn = await aiopg.connect(self._dsn, enable_hstore=False)
                async with self._lock:
                    channels = set(self._channels)
                    if channels:
                        async with conn.cursor() as cur:
                            await cur.execute(queries.listen_statement(channels))
                    self._conn = conn
                    self._listening = channels
                    self._confirmed_at = began
        except (psycopg2.Error, OSError, TimeoutError) as error:
            if conn is not None and not conn.closed:
                await conn.close()  # connected, but its LISTENs failed
            log.warning("pubsub connect failed", extra={"error": str(error)})
            return False
        return True

    async def _health_loop(self) -> None:
        """A silent network failure never errors the reader; a round trip finds it."""
        while not self._closing:  # the flag too: aiopg's wait_for may swallow a cancel
            await asyncio.sleep(self._ping_interval)
            await self._ping()

    async def _ping(self) -> None:
        async with self._lock:
            conn = self._conn
            if conn is None or conn.closed:
                return  # the reader reconnects
            began = time.monotonic()
            try:
                async with asyncio.timeout(self._ping_timeout), conn.cursor() as cur:
                    await cur.execute(queries.PING)
            except (psycopg2.Error, OSError, TimeoutError) as error:
                log.warning("pubsub round trip failed; reconnecting", extra={"error": repr(error)})
                if self._conn is conn:
                    await self._drop()
                return
            if self._conn is conn:
                self._confirmed_at = began

    def is_connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed

    def confirmed_within(self, seconds: float) -> bool:
        """Whether a round trip on the connection that began less than `seconds` ago came
        back: then every message published before it began has been delivered."""
        confirmed = self._confirmed_at
        conn = self._conn  # is_connected(), inline: asked twice on every cached request
        return (
            conn is not None
            and not conn.closed
            and confirmed is not None
            and time.monotonic() - confirmed < seconds
        )

    def backend_pid(self) -> int | None:
        """The server process of the listening connection (None while disconnected)."""
        conn = self._conn
        if conn is None or conn.closed:
            return None
        pid: int = conn.raw.get_backend_pid()
        return pid
