"""Publish after commit: the one relay of a process.

A transaction that runs NOTIFY takes a database-wide lock at commit, so under many writers
every commit that notifies queues behind the others. No write transaction notifies: what it
announces is a row of `announcements` (sql/0380, written by tenantd_announce in
sql/functions/announcements.sql) and the relay publishes the rows once they are committed:

* with TENANTD_BUS=postgres, `SELECT tenantd_publish_announcements(n)`: the only function
  that calls pg_notify, in a transaction of its own that writes nothing else;
* with nats or redis, the rows are read, handed to the bus and deleted, in one transaction
  under the same advisory lock. A row of a `durable` channel (JetStream on NATS) goes through
  the bus's awaitable `publish_acked` and its batch is deleted only once the stream has
  acknowledged every one of them: a relay (or process) that dies first, or a server that is
  down, leaves the rows for the next turn. Other rows go through the fire-and-forget
  `publish`.

When: right after this process's own commits that announced (the trigger's NOTICE reaches
the connection, or the code calls `Conn.announced`; `Database.on_announced` wakes the relay)
and every SWEEP_SECONDS regardless, which publishes what another process (a CLI, a process
that died between its commit and its relay's turn) left. Order: rows are published oldest
first under one advisory lock shared by every relay on the database, so each channel hears
its rows in the order they were written. At least once: a row is deleted in the transaction
that published it; a relay that dies before that commit leaves it to the next one (the bus
then may hear it twice; subscribers are idempotent: caches drop, SSE reads by id).

Liveness (`watch`, `confirmed_within`): every CHECK_SECONDS the relay looks at the oldest row
still waiting, without the lock (a relay stuck on it, or holding it, is what it must see). A
check that began at `t` and found nothing older than `t - age` says that everything committed
before then has been published; once the bus confirms a round trip that began after `t`, it
has been delivered too (`published_before`). Caches serve only while that moment is within
their staleness bound, as well as the bus's own round trip (cache/invalidation.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection

from tenantd.db.core import Database

log = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5  # rows no wake-up announced (other processes, a crash) wait at most this
BATCH = 1000  # rows per publishing transaction
CHECK_SECONDS = 0.5  # how often the relay looks for rows left waiting (its liveness)
CHECKS_KEPT = 16  # checks waiting for the bus to confirm a round trip after them
STOP_RETRY_SECONDS = 1.0  # a relay task still running this long after its cancel is cancelled again

PUBLISH = "SELECT tenantd_publish_announcements(%(limit)s)"
# The lock tenantd_publish_announcements takes, and its commit that does not wait for the WAL
# flush (sql/functions/announcements.sql says why that loses nothing).
LOCK = "SELECT set_config('synchronous_commit', 'off', true), pg_advisory_xact_lock(735414, 1)"
PENDING = "SELECT id, channel, payload FROM announcements ORDER BY id LIMIT %(limit)s"
DELETE = "DELETE FROM announcements WHERE id = ANY (%(ids)s)"
# How long the oldest waiting row has waited (NULL: none; created_at is its transaction's start,
# before its commit, so the age is an upper bound).
OLDEST = (
    "SELECT greatest(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8"
    " FROM announcements"
)

Publish = Callable[[str, str], None]
PublishAcked = Callable[[str, str], Awaitable[None]]
Delivered = Callable[[float], bool]  # the bus's confirmed_within


class Relay:
    """Publishes committed `announcements` rows: through PostgreSQL's NOTIFY (`publish` None)
    or a bus's `publish(channel, payload)` (fire-and-forget: a bus that is down drops the
    message; its subscribers catch up from the database when it reconnects), and the rows of
    the `durable` channels through `acked` (awaited: deleted only once the bus holds them)."""

    def __init__(
        self,
        db: Database,
        publish: Publish | None = None,
        *,
        acked: PublishAcked | None = None,
        durable: Collection[str] = (),
        sweep_seconds: float = SWEEP_SECONDS,
        batch: int = BATCH,
    ):
        self.db = db
        self.publish = publish
        self.acked = acked
        self.durable = frozenset(durable) if acked is not None else frozenset()
        self.sweep_seconds = sweep_seconds
        self.batch = batch
        self.published = 0  # rows this relay published
        # time.monotonic(): every row committed before it has been published and delivered.
        self.published_before: float | None = None
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
            acks = []
            for row in rows:
                if row["channel"] in self.durable and self.acked is not None:
                    acks.append(self.acked(row["channel"], row["payload"]))  # sent in order
                else:
                    self.publish(row["channel"], row["payload"])
            # One unacknowledged: the transaction rolls back, every row of the batch stays.
            for result in await asyncio.gather(*acks, return_exceptions=True):
                if isinstance(result, BaseException):
                    raise result
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

    # Liveness

    def confirmed_within(self, seconds: float) -> bool:
        """Whether every row committed more than `seconds` ago has been published and its
        message delivered (a timestamp comparison: asked on every cached request)."""
        before = self.published_before
        return before is not None and time.monotonic() - before < seconds

    async def watch(self, delivered: Delivered, *, interval: float = CHECK_SECONDS) -> None:
        """Keep `published_before` current until cancelled: every `interval`, how long the
        oldest waiting row has waited; a check counts once `delivered` (the bus's
        `confirmed_within`) says a round trip that began after it came back. The first
        moment counts at once: the caches start empty after it, and what they load is read
        after every commit before it."""
        self.published_before = time.monotonic()
        checks: list[tuple[float, float]] = []  # (check began, rows committed before: published)
        while True:
            began = time.monotonic()
            try:
                async with asyncio.timeout(max(interval, 1.0) * 2):
                    age = await self.db.fetch_val(OLDEST)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # no check: the moment stays where it was
                log.debug("announcement relay check failed: %r", error)
            else:
                checks.append((began, began - (age or 0.0)))
                del checks[:-CHECKS_KEPT]
            now = time.monotonic()
            while checks and delivered(now - checks[0][0]):
                before = checks.pop(0)[1]
                if self.published_before is None or before > self.published_before:
                    self.published_before = before
            await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def publishing(
    db: Database,
    publish: Publish | None = None,
    *,
    acked: PublishAcked | None = None,
    durable: Collection[str] = (),
    delivered: Delivered | None = None,
) -> AsyncIterator[Relay]:
    """This process's relay, woken by `db`'s announcing commits while the block runs (and
    watching its own liveness when the bus's `delivered` is given); at the end it publishes
    what is left once (best effort: another relay's sweep otherwise).

    The relay has connections of its own to `db`'s database (one, two with the watch): in
    the queue of a busy pool, what was announced would wait for every caller ahead of it."""
    own = await db.own_pool(2 if delivered is not None else 1)
    relay = Relay(own, publish, acked=acked, durable=durable)
    previous = db.on_announced
    db.on_announced = relay.wake
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(relay.run())]
    if delivered is not None:
        tasks.append(loop.create_task(relay.watch(delivered)))
    try:
        yield relay
    finally:
        db.on_announced = previous
        await _stop(tasks)
        try:
            await relay.publish_pending()
        except Exception as error:
            log.warning("announcements left for another relay: %r", error)
        finally:
            await relay.db.close()


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait for them to end, cancelling again a task that swallowed its
    cancel (a library that waits with asyncio.wait_for can, on Python 3.11): a relay left
    running would hold its block's exit forever."""
    running = tasks
    while running:
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=STOP_RETRY_SECONDS)
        running = [task for task in running if not task.done()]
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
