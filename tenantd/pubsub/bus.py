"""The bus every process hears announcements on: the subscriber side all buses offer.

Three implementations (TENANTD_BUS, chosen in tenantd/app/): PostgreSQL LISTEN/NOTIFY
(hub.py, the embedded default), NATS (nats_bus.py) and Redis pub/sub (redis_bus.py), sharing
core.py. Each keeps one connection per process, reconnects by itself, calls every
subscription's `on_gap` after a reconnect (messages may have been missed: subscribers catch
up from PostgreSQL) and makes a round trip on its subscriber connection every second, so that
`confirmed_within(s)` says whether every message published before a moment less than `s`
seconds ago has been delivered (caches serve only while it holds). On NATS the channels that
must not miss a message travel on JetStream: a reconnect resumes them where they stopped, and
they hear a gap only when the stream no longer holds what they missed.

`publish` is fire-and-forget: it never blocks a request and never raises; while the bus is
down the message is dropped (what it announces is in the database, and subscribers catch up
on reconnect), except on NATS's JetStream channels, where it is sent once the server is
back. What committed transactions announce reaches the bus through each process's relay
(tenantd/db/relay.py): with PostgreSQL its SQL publisher NOTIFYs (the hub's `publish` issues
a NOTIFY too, on its listening connection), with NATS or Redis it calls `publish`, and
`publish_acked` for NATS's JetStream channels (their rows are deleted once acknowledged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from tenantd.pubsub.subscription import MessageCallback, Subscription

KINDS = ("postgres", "nats", "redis")


class Bus(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def subscribe(
        self,
        channel: str,
        callback: MessageCallback,
        *,
        on_gap: Callable[[], None] | None = None,
    ) -> Subscription:
        """Call `callback(channel, payload)` for every message on `channel` from now on."""
        ...

    async def unsubscribe(self, subscription: Subscription) -> None: ...

    def publish(self, channel: str, payload: str) -> None:
        """Send, without waiting and without raising (dropped while the bus is down)."""
        ...

    async def publish_acked(self, channel: str, payload: str) -> None:
        """Send and return once the bus holds the message (NATS: the JetStream stream
        acknowledged a durable channel's); raise when it cannot. The relay deletes a durable
        channel's row only after it returned. PostgreSQL and Redis hold nothing: they
        publish."""
        ...

    def is_connected(self) -> bool: ...

    def alive(self) -> bool:
        """Whether the bus's own loops still run (they end only at close)."""
        ...

    def confirmed_within(self, seconds: float) -> bool:
        """Whether a round trip on the subscriber connection that began less than `seconds`
        ago came back: every message published before it began has been delivered."""
        ...


PUBSUB = web.AppKey("pubsub", Bus)
"""The process's bus (TENANTD_BUS), started by the composition root."""
