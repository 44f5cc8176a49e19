"""Publish after commit: the one relay of a process.

A transaction that runs NOTIFY takes a database-wide lock at commit, so under many writers
every commit that notifies queues behind the others. No write transaction notifies: what it
announces is a row of `announcements` (sql/0380, written by tenantd_announce in
sql/functions/announcements.sql) and the relay publishes the rows once they are committed:

* with TENANTD_BUS=postgres, `SELECT tenantd_publish_announcements(n)`: the only function
  that calls pg_notify, in a transaction of its own that writes nothing else;
* with nats or redis, the rows are read, handed to the bus's `publish` and deleted, in one
  transaction under the same advisory lock.

When: right after this process's own commits that announced (the trigger's NOTICE reaches
the connection, or the code calls `Conn.announced`; `Database.on_announced` wakes the relay)
and every SWEEP_SECONDS regardless, which publishes what another process (a CLI, a process
that died between its commit and its relay's turn) left. Order: rows are published oldest
first under one advisory lock shared by every relay on the database, so each channel hears
its rows in the order they were written. At least once: a row is deleted in the transaction
that published it; a relay that dies before that commit leaves it to the next one (the bus
then may hear it twice; subscribers are idempotent: caches drop, SSE reads by id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from tenantd.db.core import Database

log = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5  # rows no wake-up announced (other processes, a crash) wait at most this
BATCH = 1000  # rows per publishing transaction

PUBLISH = "SELECT tenantd_publish_announcements(%(limit)s)"
LOCK = "SELECT pg_advisory_xact_lock(735414, 1)"  # the lock tenantd_publish_announcements takes
PENDING = "SELECT id, channel, payload FROM announcements ORDER BY id LIMIT %(limit)s"
DELETE = "DELETE FROM announcements WHERE id = ANY (%(ids)s)"

Publish = Callable[[str, str], None]


class Relay:
    """Publishes committed `announcements` rows: through PostgreSQL's NOTIFY (`publish` None)
    or a bus's `publish(channel, payload)` (fire-and-forget: a bus that is down drops the
    message; its subscribers catch up from the database when it reconnects)."""

    def __init__(
        self,
        db: Database,
        publish: Publish | None = None,
        *,
        sweep_seconds: float = SWEEP_SECONDS,
        batch: int = BATCH,
    ):
        self.db = db
        self.publish = publish
        self.sweep_seconds = sweep_seconds
        self.batch = batch
        self.published = 0  # rows this relay published
        self._woken = asyncio.Event()
        self._failing = False

    def wake(self) -> None:
        """Publish soon: a commit of this process announced something."""
        self._woken.set()

    async def publish_pending(self) -> int:
        """Publish every row committed by now, in batches; how many."""
        total = 0
        while True:
            count = await self._publish_batch()
            self.published += count
            total += count
            if count < self.batch:
                return total

    async def _publish_batch(self) -> int:
        if self.publish is None:
            return int(await self.db.fetch_val(PUBLISH, {"limit": self.batch}))
        async with self.db.transaction() as conn:
            await conn.execute(LOCK)
            rows = await conn.fetch_all(PENDING, {"limit": self.batch})
            for row in rows:
                self.publish(row["channel"], row["payload"])
            if rows:
                await conn.execute(DELETE, {"ids": [row["id"] for row in rows]})
        return len(rows)

    async def run(self) -> None:
        """Publish when woken and every `sweep_seconds`, until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.sweep_seconds):
                    await self._woken.wait()
            self._woken.clear()
            try:
                await self.publish_pending()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not self._failing:  # once per outage: the sweep retries every half second
                    log.warning("announcement relay failed; retrying: %r", error)
                self._failing = True
            else:
                if self._failing:
                    log.warning("announcement relay publishing again")
                self._failing = False


@contextlib.asynccontextmanager
async def publishing(db: Database, publish: Publish | None = None) -> AsyncIterator[Relay]:
    """This process's relay, woken by `db`'s announcing commits while the block runs; at the
    end it publishes what is left once (best effort: another relay's sweep otherwise)."""
    relay = Relay(db, publish)
    previous = db.on_announced
    db.on_announced = relay.wake
    task = asyncio.get_running_loop().create_task(relay.run())
    try:
        yield relay
    finally:
        db.on_announced = previous
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        try:
            await relay.publish_pending()
        except Exception as error:
            log.warning("announcements left for another relay: %r", error)
