"""What the three buses share: the channel registry, fire-and-forget sends, the reconnect
loop with backoff, the round-trip clock behind `confirmed_within`, and shutdown.

Each bus (hub.py, nats_bus.py, redis_bus.py) keeps its own connection and tells this core
when a channel gets its first subscriber or loses its last (`_channel_added`,
`_channel_removed`); everything else about subscriptions lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from tenantd.pubsub.subscription import (
    GapHandler,
    MessageCallback,
    Subscription,
    dispatch,
    tell_gap,
)

log = logging.getLogger(__name__)

PING_INTERVAL_SECONDS = 1.0
PING_TIMEOUT_SECONDS = 3.0
FIRST_RETRY_SECONDS = 0.1


class BusCore:
    """The bookkeeping every bus shares; subclasses own the connection."""

    reconnect_max_seconds = 5.0

    def __init__(
        self,
        *,
        ping_interval: float = PING_INTERVAL_SECONDS,
        ping_timeout: float = PING_TIMEOUT_SECONDS,
    ):
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        # time.monotonic() when the last round trip that came back began.
        self._confirmed_at: float | None = None
        self._channels: dict[str, set[Subscription]] = {}
        self._tasks: list[asyncio.Task[None]] = []  # the bus's loops: they end only at close
        self._sends: set[asyncio.Task[None]] = set()  # one-off work (sends, syncs)
        self._closing = False
        self._lock = asyncio.Lock()  # commands on the connection, one at a time
        self.reconnects = 0

    @property
    def channels(self) -> set[str]:
        return set(self._channels)

    # Subscriptions

    async def subscribe(
        self, channel: str, callback: MessageCallback, *, on_gap: GapHandler | None = None
    ) -> Subscription:
        """Bus.subscribe: a subscriber of `channel`, its channel subscribed on first use."""
        self._check_channel(channel)
        subscription = Subscription(channel=channel, callback=callback, on_gap=on_gap)
        subscribers = self._channels.setdefault(channel, set())
        first = not subscribers
        subscribers.add(subscription)
        await self._channel_added(channel, first=first)
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        if not subscription.active:
            return
        subscription.active = False
        subscribers = self._channels.get(subscription.channel)
        if subscribers is None:
            return
        subscribers.discard(subscription)
        if not subscribers:
            del self._channels[subscription.channel]
            await self._channel_removed(subscription.channel)

    def _check_channel(self, channel: str) -> None:
        """Raise ValueError for a name the bus cannot carry."""

    async def _channel_added(self, channel: str, *, first: bool) -> None:
        """A subscriber joined `channel` (`first`: it had none)."""

    async def _channel_removed(self, channel: str) -> None:
        """`channel` lost its last subscriber."""

    def _dispatch(self, channel: str, payload: str) -> None:
        dispatch(self._channels.get(channel, ()), channel, payload)

    def _gap_channels(self) -> dict[str, set[Subscription]]:
        """The channels a reconnect may have made miss messages (all, unless a bus recovers
        some by itself)."""
        return self._channels

    def _tell_gap(self) -> None:
        tell_gap(self._gap_channels())

    # Tasks

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without waiting for it; close() cancels what is still running."""
        task = asyncio.get_running_loop().create_task(work)
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    def _start_loops(self, *loops: Coroutine[Any, Any, None]) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(work) for work in loops]
        for task in self._tasks:
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A loop of the bus ended outside close(): nothing is heard any more, and /readyz
        says so (`alive`)."""
        if self._closing or task.cancelled():
            return
        log.error("bus loop ended; this instance is not ready", exc_info=task.exception())

    def alive(self) -> bool:
        """Whether the bus's own loops still run (they end only at close)."""
        return bool(self._tasks) and not any(task.done() for task in self._tasks)

    async def _stop_tasks(self) -> None:
        self._closing = True
        tasks = [*self._tasks, *self._sends]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # Reconnecting

    async def _reconnect(self, connect: Callable[[], Awaitable[bool]]) -> bool:
        """Call `connect` until it succeeds (backing off up to reconnect_max_seconds), then
        tell every subscriber that it may have missed messages. False when closing."""
        delay = FIRST_RETRY_SECONDS
        while not self._closing:
            if await connect():
                self.reconnects += 1
                log.info("bus reconnected", extra={"channels": len(self._channels)})
                self._tell_gap()
                return True
            log.warning("bus reconnect failed; retrying", extra={"delay": delay})
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.reconnect_max_seconds)
        return False

    # Reading (PostgreSQL and Redis: a connection the bus reads from in its own loop)

    async def _read_loop(self) -> None:
        """Hand every message of the current connection to `_handle`; a connection that
        fails is dropped and a new one made (`_connect`, with backoff)."""
        while not self._closing:
            conn = self._connection()
            if conn is None:
                await self._reconnect(self._connect)
                continue
            try:
                message = await self._receive(conn)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._closing:
                    return
                log.warning("bus connection lost; reconnecting", extra={"error": repr(error)})
                async with self._lock:
                    if self._connection() is conn:
                        await self._drop()
                continue
            self._handle(message)

    def _connection(self) -> Any:
        """The open connection the loop reads, or None."""
        raise NotImplementedError

    async def _receive(self, conn: Any) -> Any:
        raise NotImplementedError

    def _handle(self, message: Any) -> None:
        raise NotImplementedError

    async def _connect(self) -> bool:
        """One connect with every channel subscribed; False when it failed."""
        raise NotImplementedError

    async def _drop(self) -> None:
        """(Under the lock.) Close the current connection; the loop makes a new one."""

    # The round-trip clock

    def is_connected(self) -> bool:
        raise NotImplementedError

    def confirmed_within(self, seconds: float) -> bool:
        """Whether a round trip on the subscriber connection that began less than `seconds`
        ago came back: every message published before it began has been delivered."""
        confirmed = self._confirmed_at
        return (
            confirmed is not None and self.is_connected() and time.monotonic() - confirmed < seconds
        )
