"""TENANTD_BUS: which bus this process hears announcements on, and how what its commits
announce reaches it.

No write transaction publishes: what it announces is a row of `announcements`, and the
process's relay (tenantd/db/relay.py) publishes the committed rows, woken right after this
process's own announcing commits (trigger NOTICEs, `Conn.announced`) and every half second.
With `postgres` the relay runs the SQL publisher (pg_notify, in a transaction of its own) and
the hub LISTENs; with `nats` or `redis` nothing LISTENs and the relay hands each row to the
bus's `publish` (NATS's JetStream channels: `publish_acked`, the row deleted once the stream
acknowledged it). Trigger NOTICEs (`tenantd_cache:<kind>:<id>`) are still applied in-process
at once by the writing connection's `Database.notice_sink`, before the bus hears them.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from aiohttp import web

from tenantd.cache.invalidation import CHANNEL
from tenantd.db import Database
from tenantd.db.relay import Relay, publishing
from tenantd.identity.keys.queries import CHANNEL as KEYS_CHANNEL
from tenantd.notifications.definitions import CHANNEL as EVENT_TYPES_CHANNEL
from tenantd.pubsub import Bus, PubSubHub
from tenantd.pubsub.nats_bus import NatsBus
from tenantd.pubsub.redis_bus import RedisBus
from tenantd.settings import BusSettings

RELAY = web.AppKey("relay", Relay)
"""The process's relay (its liveness is part of the caches' staleness rule)."""

DURABLE_CHANNELS = frozenset({CHANNEL, KEYS_CHANNEL, EVENT_TYPES_CHANNEL})
"""What NATS carries on JetStream (a subscriber cut off gets it after it reconnects):
revocations and cache invalidations, signing-key changes, event-type definitions. SSE
fan-out stays on NATS core: a stream catches up from PostgreSQL by its last event id."""


def make_bus(settings: BusSettings, db: Database) -> Bus:
    if settings.kind == "nats":
        return NatsBus(settings.nats_url, durable=DURABLE_CHANNELS)
    if settings.kind == "redis":
        return RedisBus(settings.redis_url)
    return PubSubHub(db.dsn)


def bus_relay(settings: BusSettings, bus: Bus, db: Database) -> AbstractAsyncContextManager[Relay]:
    """The process's relay: PostgreSQL's NOTIFY (the SQL publisher), or the bus's `publish`,
    with `publish_acked` for NATS's JetStream channels (a row deleted once the stream holds
    it). It watches its liveness against the bus's round trip (the caches' `live`)."""
    delivered = bus.confirmed_within
    if settings.kind == "postgres":
        return publishing(db, delivered=delivered)
    durable = DURABLE_CHANNELS if settings.kind == "nats" else frozenset()
    return publishing(
        db, bus.publish, acked=bus.publish_acked, durable=durable, delivered=delivered
    )
