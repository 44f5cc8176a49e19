"""The bus on Redis pub/sub (TENANTD_BUS=redis): one subscriber connection per process.

A server that offers sharded pub/sub (Redis 7: SSUBSCRIBE/SPUBLISH; in a cluster a channel
then lives on one shard instead of being broadcast to every node) gets it; an older one plain
SUBSCRIBE/PUBLISH. Each channel is `tenantd.<channel>`. When the subscriber connection fails,
the bus reconnects with backoff, subscribes every channel again and calls every `on_gap`.
Every second a PING on the subscriber connection (its PONG comes back in order with the
messages) confirms that everything published before it began has been delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis.asyncio as redis
from redis.asyncio.client import PubSub

from tenantd.pubsub.core import BusCore

log = logging.getLogger(__name__)

PREFIX = "tenantd."
CONNECT_TIMEOUT_SECONDS = 2.0
RECONNECT_MAX_SECONDS = 5.0
# Always subscribed, so the connection stays in subscriber mode (a PING answers in order
# with the messages) even before anything else is.
KEEPALIVE_CHANNEL = PREFIX + "bus"


def sharded_pubsub(version: str) -> bool:
    """Redis 7.0 and later offer SSUBSCRIBE/SPUBLISH."""
    try:
        return int(version.split(".")[0]) >= 7
    except ValueError:
        return False


class RedisBus(BusCore):
    reconnect_max_seconds = RECONNECT_MAX_SECONDS

    def __init__(self, url: str, **clock: float):  # ping_interval, ping_timeout: BusCore's
        super().__init__(**clock)
        self._url = url
        self._client: redis.Redis = redis.Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=self._ping_timeout,
        )
        self._pubsub: PubSub | None = None
        self.sharded = False
        self._pings: list[float] = []  # when each unanswered PING was sent, oldest first

    async def start(self) -> None:
        await self._connect()  # a server that is down: the reader keeps connecting
        self._start_loops(self._read_loop(), self._health_loop())

    async def _connect(self) -> bool:
        began = time.monotonic()
        pubsub: PubSub | None = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS + self._ping_timeout):
                info = await self._client.info("server")
                sharded = sharded_pubsub(str(info.get("redis_version", "")))
                pubsub = self._client.pubsub()
                async with self._lock:
                    await pubsub.subscribe(KEEPALIVE_CHANNEL)
                    names = [PREFIX + channel for channel in self._channels]
                    if names:
                        if sharded:
                            await pubsub.ssubscribe(*names)
                        else:
                            await pubsub.subscribe(*names)
                    self._pubsub, self.sharded = pubsub, sharded
                    self._pings = []
                    self._confirmed_at = began
        except Exception as error:
            if pubsub is not None:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            log.warning("bus connect failed; retrying", extra={"error": repr(error)})
            return False
        return True

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._confirmed_at = None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _connection(self) -> PubSub | None:
        return self._pubsub

    async def _receive(self, conn: PubSub) -> Any:
        return await conn.get_message(timeout=self._ping_interval)

    def _handle(self, message: dict[str, Any] | None) -> None:
        if message is None:
            return
        kind = message.get("type")
        if kind == "pong":
            if self._pings:
                self._confirmed_at = self._pings.pop(0)
            return
        if kind not in ("message", "smessage"):
            return
        name = message["channel"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        if not name.startswith(PREFIX) or name == KEEPALIVE_CHANNEL:
            return
        channel = name[len(PREFIX) :]
        data = message["data"]
        payload = data.decode() if isinstance(data, bytes) else str(data)
        self._dispatch(channel, payload)

    async def _health_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._ping_interval)
            pubsub = self._pubsub
            if pubsub is None:
                continue
            if self._pings and time.monotonic() - self._pings[0] > self._ping_timeout:
                log.warning("bus round trip unanswered; reconnecting")
                async with self._lock:
                    if self._pubsub is pubsub:
                        await self._drop()
                continue
            began = time.monotonic()
            try:
                async with self._lock:
                    if self._pubsub is not pubsub:
                        continue
                    self._pings.append(began)
                    await pubsub.ping()
            except Exception as error:
                log.warning("bus round trip failed", extra={"error": repr(error)})

    async def close(self) -> None:
        await self._stop_tasks()
        await self._drop()
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def _channel_added(self, channel: str, *, first: bool) -> None:
        if first:
            await self._command(channel, subscribe=True)

    async def _channel_removed(self, channel: str) -> None:
        await self._command(channel, subscribe=False)

    async def _command(self, channel: str, *, subscribe: bool) -> None:
        async with self._lock:
            pubsub = self._pubsub
            if pubsub is None:
                return  # the reconnect subscribes every channel
            name = PREFIX + channel
            try:
                if subscribe:
                    await (pubsub.ssubscribe(name) if self.sharded else pubsub.subscribe(name))
                else:
                    await (pubsub.sunsubscribe(name) if self.sharded else pubsub.unsubscribe(name))
            except Exception as error:
                log.warning("bus command failed; reconnecting", extra={"error": repr(error)})
                await self._drop()

    def publish(self, channel: str, payload: str) -> None:
        if self._closing or self._pubsub is None:
            return  # down: the message is in the database; subscribers catch up on reconnect
        self._spawn(self._send(channel, payload))

    async def publish_acked(self, channel: str, payload: str) -> None:
        """Bus.publish_acked: Redis pub/sub holds nothing; the same as `publish`."""
        self.publish(channel, payload)

    async def _send(self, channel: str, payload: str) -> None:
        name = PREFIX + channel
        for attempt in (1, 2):  # a pooled connection may have died with a restarted server
            try:
                if self.sharded:
                    await self._client.spublish(name, payload)
                else:
                    await self._client.publish(name, payload)
                return
            except redis.ConnectionError as error:
                if attempt == 2:
                    log.warning("bus publish failed", extra={"error": repr(error)})
            except Exception as error:
                log.warning("bus publish failed", extra={"error": repr(error)})
                return

    def is_connected(self) -> bool:
        return self._pubsub is not None
