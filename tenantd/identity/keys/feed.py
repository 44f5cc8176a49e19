"""Keeps this process's keyring equal to signing_keys without a restart.

Why LISTEN/NOTIFY and a timer, both: the trigger of sql/0100 NOTIFYs tenantd_keys on every
change, so a rotation, a retirement or a withdrawn key reaches every instance in
milliseconds (a `retire --now` must). A listener that reconnected may have missed one, so a
gap reloads too; and a listener can die silently, so every RELOAD_SECONDS the keys are read
again regardless. That bound is far below the publication lead (a next key signs at least
PUBLISH_LEAD after it appears), so no instance ever meets a token of a key it has not read.
Promotion of a next key needs no message at all: the keyring picks the signing key by time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from tenantd.cache.reloader import Reloader
from tenantd.db import Database
from tenantd.identity.keys import queries, service
from tenantd.identity.keys.keyring import RELOAD_SECONDS, Keyring
from tenantd.pubsub import Bus
from tenantd.settings import Settings

log = logging.getLogger(__name__)

CHANNEL = queries.CHANNEL


class KeyringFeed(Reloader):
    def __init__(self, db: Database, keyring: Keyring, *, interval: float = RELOAD_SECONDS):
        super().__init__(interval)
        self.db = db
        self.keyring = keyring

    async def reload(self) -> None:
        async with self.db.connection() as conn:
            await service.load(conn, self.keyring)

    def reload_failed(self) -> None:
        log.exception("signing keys could not be reloaded; keeping the ones loaded")


async def prepare(db: Database, settings: Settings, keyring: Keyring) -> None:
    """Start-up: make sure a key signs (the first instance creates it), then load."""
    async with db.transaction() as conn:
        did = await service.ensure(conn, settings, rotate_when_due=False)
    if did:
        log.info("signing keys: %s", did)
    async with db.connection() as conn:
        await service.load(conn, keyring)


@contextlib.asynccontextmanager
async def fed(
    db: Database, settings: Settings, keyring: Keyring, hub: Bus
) -> AsyncIterator[KeyringFeed]:
    """Load the keyring now and keep it fresh until the block ends."""
    feed = KeyringFeed(db, keyring)
    subscription = await hub.subscribe(CHANNEL, feed.request_reload, on_gap=feed.request_reload)
    await prepare(db, settings, keyring)
    feed.start()
    try:
        yield feed
    finally:
        await feed.stop()
        await hub.unsubscribe(subscription)
