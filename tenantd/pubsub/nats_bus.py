"""The bus on NATS core subjects (TENANTD_BUS=nats): one client connection per process.

Each channel is the subject `tenantd.<channel>`; NATS fans a message out to every instance
subscribed at that moment (at most once: a subscriber that was disconnected misses it, and
its `on_gap` makes it catch up from PostgreSQL). The client reconnects by itself and
subscribes again; if the server is down when the process starts, a task keeps connecting.
Every second a flush (PING/PONG on the subscriber connection) confirms that everything
published before it began has been delivered (`confirmed_within`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from tenantd.pubsub.subscription import MessageCallback, Subscription, dispatch, tell_gap

log = logging.getLogger(__name__)

PREFIX = "tenantd."
PING_INTERVAL_SECONDS = 1.0
PING_TIMEOUT_SECONDS = 3.0
CONNECT_TIMEOUT_SECONDS = 2.0
RECONNECT_WAIT_SECONDS = 0.25
RECONNECT_MAX_SECONDS = 5.0


class NatsBus:
    def __init__(
        self,
        url: str,
        *,
        ping_interval: float = PING_INTERVAL_SECONDS,
        ping_timeout: float = PING_TIMEOUT_SECONDS,
    ):
        self._url = url
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._nc: Client | None = None
        self._confirmed_at: float | None = None
        self._channels: dict[str, set[Subscription]] = {}
        self._subs: dict[str, NatsSubscription] = {}
        self._lock = asyncio.Lock()  # (un)subscribing and (re)connecting, one at a time
        self._tasks: list[asyncio.Task[None]] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._closing = False
        self.reconnects = 0

    @property
    def channels(self) -> set[str]:
        return set(self._channels)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if not await self._connect():
            self._tasks.append(loop.create_task(self._connect_loop()))
        self._tasks.append(loop.create_task(self._health_loop()))

    async def _connect(self) -> bool:
        """One connect (with the subscriptions); False when the server cannot be reached."""
        began = time.monotonic()
        try:
            nc = await nats.connect(
                servers=[self._url],
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_SECONDS,
                ping_interval=2,
                max_outstanding_pings=2,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
                error_cb=self._on_error,
                name="tenantd",
            )
        except Exception as error:
            log.warning("bus connect failed; retrying", extra={"error": repr(error)})
            return False
        async with self._lock:
            self._nc = nc
            for channel in list(self._channels):
                await self._subscribe_subject(channel)
        self._confirmed_at = began
        return True

    async def _connect_loop(self) -> None:
        delay = RECONNECT_WAIT_SECONDS
        while not self._closing:
            await asyncio.sleep(delay)
            if await self._connect():
                self.reconnects += 1
                tell_gap(self._channels)  # what was published before we connected is missed
                return
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    async def _on_disconnected(self) -> None:
        self._confirmed_at = None
        if not self._closing:
            log.warning("bus connection lost; reconnecting")

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        log.info("bus reconnected", extra={"channels": len(self._channels)})
        tell_gap(self._channels)

    async def _on_error(self, error: Exception) -> None:
        if not self._closing:
            log.warning("bus error", extra={"error": repr(error)})

    def alive(self) -> bool:
        return bool(self._tasks) and not self._tasks[-1].done()

    async def close(self) -> None:
        self._closing = True
        for task in [*self._tasks, *self._sends]:
            task.cancel()
        for task in [*self._tasks, *self._sends]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        nc, self._nc = self._nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()

    async def subscribe(
        self,
        channel: str,
        callback: MessageCallback,
        *,
        on_gap: Callable[[], None] | None = None,
    ) -> Subscription:
        subscription = Subscription(channel=channel, callback=callback, on_gap=on_gap)
        async with self._lock:
            subscribers = self._channels.setdefault(channel, set())
            subscribers.add(subscription)
            if channel not in self._subs:
                await self._subscribe_subject(channel)
        return subscription

    async def _subscribe_subject(self, channel: str) -> None:
        nc = self._nc
        if nc is None or nc.is_closed:
            return  # the connect subscribes every channel

        async def deliver(msg: Msg) -> None:
            dispatch(self._channels.get(channel, ()), channel, msg.data.decode())

        try:
            self._subs[channel] = await nc.subscribe(PREFIX + channel, cb=deliver)
        except Exception as error:  # while reconnecting the client queues it
            log.warning("bus subscribe failed", extra={"error": repr(error)})

    async def unsubscribe(self, subscription: Subscription) -> None:
        if not subscription.active:
            return
        subscription.active = False
        async with self._lock:
            subscribers = self._channels.get(subscription.channel)
            if subscribers is None:
                return
            subscribers.discard(subscription)
            if subscribers:
                return
            del self._channels[subscription.channel]
            sub = self._subs.pop(subscription.channel, None)
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    def publish(self, channel: str, payload: str) -> None:
        nc = self._nc
        if self._closing or nc is None or nc.is_closed:
            return  # down: the message is in the database; subscribers catch up on reconnect
        task = asyncio.get_running_loop().create_task(self._send(nc, channel, payload))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _send(self, nc: Client, channel: str, payload: str) -> None:
        try:
            await nc.publish(PREFIX + channel, payload.encode())
        except Exception as error:
            log.warning("bus publish failed", extra={"error": repr(error)})

    async def _health_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._ping_interval)
            nc = self._nc
            if nc is None or not nc.is_connected:
                self._confirmed_at = None
                continue
            began = time.monotonic()
            try:
                await nc.flush(timeout=max(1, round(self._ping_timeout)))
            except Exception as error:
                log.warning("bus round trip failed", extra={"error": repr(error)})
                self._confirmed_at = None
                continue
            if nc.is_connected:
                self._confirmed_at = began

    def is_connected(self) -> bool:
        nc = self._nc
        return nc is not None and nc.is_connected

    def confirmed_within(self, seconds: float) -> bool:
        confirmed = self._confirmed_at
        return (
            confirmed is not None and self.is_connected() and time.monotonic() - confirmed < seconds
        )
