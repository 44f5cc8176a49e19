"""TENANTD_BUS: which bus this process hears announcements on, and how what its commits
announce reaches it.

No write transaction publishes: what it announces is a row of `announcements`, and the
process's relay (tenantd/db/relay.py) publishes the committed rows, woken right after this
process's own announcing commits (trigger NOTICEs, `Conn.announced`) and every half second.
With `postgres` the relay runs the SQL publisher (pg_notify, in a transaction of its own) and
the hub LISTENs; with `nats` or `redis` nothing LISTENs and the relay hands each row to the
bus's `publish`. Trigger NOTICEs (`tenantd_cache:<kind>:<id>`) are still applied in-process
at once by the writing connection's `Database.notice_sink`, before the bus hears them.
"""

from __future__ import annotations

from tenantd.cache.invalidation import CHANNEL
from tenantd.db import Database
from tenantd.db.relay import Publish
from tenantd.identity.keys.queries import CHANNEL as KEYS_CHANNEL
from tenantd.notifications.definitions import CHANNEL as EVENT_TYPES_CHANNEL
from tenantd.pubsub import Bus, PubSubHub
from tenantd.pubsub.nats_bus import NatsBus
from tenantd.pubsub.redis_bus import RedisBus
from tenantd.settings import BusSettings

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


def relay_publish(settings: BusSettings, bus: Bus) -> Publish | None:
    """How the relay publishes: None (PostgreSQL's NOTIFY, from the SQL publisher), or the
    bus's own `publish`."""
    return None if settings.kind == "postgres" else bus.publish
