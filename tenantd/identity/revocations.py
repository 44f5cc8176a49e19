"""Keeps the principal cache's mirror of revocations (tenantd/identity/revoked.py) loaded.

The mirror is fed by the same announcements as the cache (`jti:` and `session:` on
tenantd_cache, heard by the cache's own subscription); this feed loads it in full at start,
after every gap (a listener reconnect, a writer's notice overflow) and every RELOAD_SECONDS
(which also forgets expired jtis and swept families). Until a load that began after the last
gap has finished, the mirror answers nothing and the guard runs its statement.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from tenantd.cache.invalidation import CHANNEL
from tenantd.cache.reloader import Reloader
from tenantd.db import Database
from tenantd.identity import queries
from tenantd.identity.revoked import Revocations
from tenantd.pubsub import Bus

log = logging.getLogger(__name__)

RELOAD_SECONDS = 300.0
RETRY_SECONDS = 1.0


class RevocationFeed(Reloader):
    retry_seconds = RETRY_SECONDS

    def __init__(self, db: Database, mirror: Revocations, *, interval: float = RELOAD_SECONDS):
        super().__init__(interval)
        self.db = db
        self.mirror = mirror

    async def reload(self) -> bool:
        """One full load; whether the mirror answers after it."""
        epoch = self.mirror.begin_load()
        async with self.db.connection() as conn:
            jtis, families = await queries.revocations(conn)
        ready = self.mirror.finish_load(epoch, jtis, families)
        if not ready and epoch == self.mirror.epoch:
            log.warning(
                "too many revocations to mirror; cold tokens run the token-state statement",
                extra={"jtis": len(jtis), "sessions": len(families)},
            )
        return ready

    def reload_failed(self) -> None:
        log.exception("revocations could not be loaded; the guard runs its statement")
        self.mirror.gap()  # not ready, and asks again


@contextlib.asynccontextmanager
async def mirrored(db: Database, mirror: Revocations, hub: Bus) -> AsyncIterator[RevocationFeed]:
    """Load the mirror now (after subscribing: nothing committed later is missed) and keep
    it loaded until the block ends. The announcements themselves reach the mirror through
    the principal cache's subscription; this one only hears gaps."""
    feed = RevocationFeed(db, mirror)
    mirror.on_stale = feed.request_reload
    subscription = await hub.subscribe(CHANNEL, lambda _channel, _payload: None, on_gap=mirror.gap)
    try:
        await feed.reload()
    except Exception:
        log.exception("revocations could not be loaded; retrying in the background")
        mirror.gap()
    feed.start()
    try:
        yield feed
    finally:
        await feed.stop()
        mirror.on_stale = lambda: None
        mirror.stop()
        await hub.unsubscribe(subscription)
