"""The sequencer: numbers committed events in commit order and hands each new batch to the
consumers (webhook fan-out) in the same transaction, so a consumer sees every event once.

Every `tenantd serve` runs a relay; the row lock on outbox_sequencer (taken with SKIP LOCKED)
lets one of them work at a time while the others skip their turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from tenantd.db import Conn, Database, Row
from tenantd.outbox import queries

log = logging.getLogger(__name__)

# Called with the sequencing transaction's connection and the events just numbered.
Consumer = Callable[[Conn, list[Row]], Awaitable[None]]

BATCH = 1000


async def sequence(conn: Conn, *, limit: int = BATCH) -> list[Row] | None:
    """Number up to `limit` committed events (caller's transaction); None when another
    sequencer holds the turn."""
    last = await conn.fetch_val(queries.LOCK_SEQUENCER)
    if last is None:
        if await conn.fetch_val(queries.SEQUENCER_ROWS):
            return None  # another sequencer has the turn
        await conn.execute(queries.SEED_SEQUENCER)
        last = await conn.fetch_val(queries.LOCK_SEQUENCER)
        if last is None:
            return None
    rows = await conn.fetch_all(queries.SEQUENCE, {"last": last, "limit": limit})
    if rows:
        rows.sort(key=lambda row: row["seq"])
        await conn.execute(queries.SAVE_SEQUENCER, {"last": rows[-1]["seq"]})
    return rows


async def pump(
    db: Database,
    consumers: Sequence[Consumer] = (),
    *,
    limit: int = BATCH,
    committed: Callable[[], None] | None = None,
) -> int:
    """Sequence until nothing is left (or another sequencer has the turn); return how many
    events this call numbered. `committed` is called after each batch's commit (what the
    consumers wrote, e.g. jobs, is visible from then on)."""
    total = 0
    while True:
        async with db.transaction() as conn:
            rows = await sequence(conn, limit=limit)
            if rows:
                for consumer in consumers:
                    await consumer(conn, rows)
        if rows and committed is not None:
            committed()
        if not rows:
            return total
        total += len(rows)
        if len(rows) < limit:
            return total


class Relay:
    """This process's sequencer loop: pumps every `poll_seconds`, or at once when woken."""

    def __init__(
        self,
        db: Database,
        consumers: Sequence[Consumer],
        *,
        poll_seconds: float,
        committed: Callable[[], None] | None = None,
    ):
        self.db = db
        self.consumers = list(consumers)
        self.committed = committed
        self.poll_seconds = poll_seconds
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        idle = False  # the last turn found nothing to number
        while not self._stopping:
            woken = self._wake.is_set()
            self._wake.clear()
            try:
                # An idle relay looks first with one statement outside a transaction (the turn
                # itself is four round trips: begin, lock, number, commit).
                if woken or not idle or await self.db.fetch_val(queries.ANY_UNNUMBERED):
                    idle = await pump(self.db, self.consumers, committed=self.committed) == 0
            except Exception:
                idle = False
                log.exception("outbox relay failed; retrying")
            if self._stopping:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_seconds)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def read(conn: Conn, *, after: int, types: Sequence[str] | None, limit: int) -> list[Row]:
    """Numbered events after the cursor `after`, in commit order."""
    return await conn.fetch_all(
        queries.READ_EVENTS,
        {"after": after, "types": list(types) if types else None, "limit": limit},
    )
