"""TENANTD_BUS: which bus this process hears announcements on, and how its own committed
writes reach it when the bus is not PostgreSQL.

With `postgres` the SQL announces (NOTIFY, delivered on commit) and the hub LISTENs. With
`nats` or `redis` nothing LISTENs; each process publishes what its own commits announce,
after commit, through two seams of the db layer:

* trigger NOTICEs (`tenantd_cache:<kind>:<id>`: cache invalidations, revocations, API keys,
  inboxes), which the writing connection hands to `Database.notice_sink` once durable: they
  are applied in-process as before and forwarded to the bus;
* `Conn.announce(channel, payload)` of the code paths whose SQL only NOTIFYs (SSE
  deliveries, signing-key and event-type changes), which calls `Database.announce_sink`
  after commit.
"""

from __future__ import annotations

from tenantd.cache.invalidation import CHANNEL, PSYCOPG_NOTICE_LIMIT
from tenantd.db import Database
from tenantd.db.core import NoticeSink
from tenantd.identity.keys.queries import CHANNEL as KEYS_CHANNEL
from tenantd.notifications.definitions import CHANNEL as EVENT_TYPES_CHANNEL
from tenantd.pubsub import Bus, PubSubHub
from tenantd.pubsub.nats_bus import NatsBus
from tenantd.pubsub.redis_bus import RedisBus
from tenantd.settings import BusSettings

PREFIX = CHANNEL + ":"

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


def forwarded(bus: Bus, local: NoticeSink | None) -> NoticeSink:
    """A notice sink that applies the notices in-process (`local`) and publishes each cache
    announcement on the bus; a full notice list (some were dropped) publishes `all`."""

    def sink(notices: list[str]) -> None:
        if local is not None:
            local(notices)
        if len(notices) >= PSYCOPG_NOTICE_LIMIT:
            bus.publish(CHANNEL, "all")
            return
        for notice in notices:
            at = notice.find(PREFIX)
            if at >= 0:
                bus.publish(CHANNEL, notice[at + len(PREFIX) :].strip())

    return sink


def publish_commits(bus: Bus, db: Database) -> None:
    """Route this process's committed announcements to `bus` (a bus that is not PostgreSQL)."""
    db.notice_sink = forwarded(bus, db.notice_sink)
    db.announce_sink = bus.publish
