"""Group commit of job rows: concurrent one-off enqueues of a process share one statement.

A burst of `send` calls (32 callers at once, each writing one job row on its own
connection) costs a round trip and a commit per row. Here a caller that finds a write in
flight joins the next one instead: every write takes all rows waiting at its start, in one
INSERT, so the rows per statement grow with the load and an idle caller waits for no one.
Each caller still returns only after its own row is committed (or gets the statement's
error), so nothing a caller was told is queued can be lost.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenantd.db import Database
from tenantd.jobs import queries

MAX_WRITES_IN_FLIGHT = 2  # statements at once (one fills while the other commits)
MAX_ROWS_PER_WRITE = 500


@dataclass(eq=False)
class _Waiting:
    kind: str
    payload: dict[str, Any]
    max_attempts: int
    user_id: uuid.UUID
    done: asyncio.Future[int | None] = field(default_factory=asyncio.Future)


class CoalescingWriter:
    """`enqueue(db, kind, payload, for_user=...)` rows of one process, written together when
    callers overlap."""

    def __init__(self, db: Database, *, on_written: Callable[[], None] | None = None):
        self.db = db
        self._waiting: list[_Waiting] = []
        self._in_flight = 0
        self._on_written = on_written
        self._tasks: set[asyncio.Task[None]] = set()
        self.statements = 0  # how many INSERTs were made (tests, benchmarks)

    async def write_for_user(
        self, *, kind: str, payload: dict[str, Any], max_attempts: int, user_id: uuid.UUID
    ) -> int | None:
        """The job's id once committed, or None when user `user_id` does not exist."""
        item = _Waiting(kind=kind, payload=payload, max_attempts=max_attempts, user_id=user_id)
        self._waiting.append(item)
        if self._in_flight < MAX_WRITES_IN_FLIGHT:
            self._start_write()
        return await item.done

    def _start_write(self) -> None:
        batch, self._waiting = (
            self._waiting[:MAX_ROWS_PER_WRITE],
            self._waiting[MAX_ROWS_PER_WRITE:],
        )
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._write(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, batch: list[_Waiting]) -> None:
        try:
            try:
                ids = await self._insert(batch)
            except Exception as error:
                if len(batch) == 1:
                    _settle(batch[0], error=error)
                    return
                # One bad row must not fail its neighbours: each is tried again alone.
                ids = []
                for item in batch:
                    try:
                        ids.extend(await self._insert([item]))
                    except Exception as alone:
                        _settle(item, error=alone)
                        ids.append(None)
            for item, job_id in zip(batch, ids, strict=True):
                _settle(item, job_id=job_id)
            if self._on_written is not None and any(job_id is not None for job_id in ids):
                self._on_written()
        except BaseException as error:  # cancelled (shutdown): nobody may wait forever
            for item in batch:
                _settle(item, error=error)
            raise
        finally:
            self._in_flight -= 1
            if self._waiting and self._in_flight < MAX_WRITES_IN_FLIGHT:
                self._start_write()

    async def _insert(self, batch: list[_Waiting]) -> list[int | None]:
        async with self.db.connection() as conn:
            ids = await queries.insert_jobs_for_users(
                conn, rows=[(w.kind, w.payload, w.max_attempts, w.user_id) for w in batch]
            )
        self.statements += 1
        return ids


def _settle(
    item: _Waiting, *, job_id: int | None = None, error: BaseException | None = None
) -> None:
    """Hand the caller its answer, unless it stopped waiting (cancelled)."""
    if item.done.done():
        return
    if error is not None:
        item.done.set_exception(error)
    else:
        item.done.set_result(job_id)
