"""Many queued dispatches in one transaction, their notifications written by one statement.

`dispatch` writes a notification with one statement (DISPATCH_SQL): a batch of 16 jobs run
one after another costs 16 round trips. Here the batch's dispatches run side by side on one
connection that takes one statement at a time; each one's DISPATCH_SQL is held back until
every dispatch still running has reached its own, and then all of them go as one statement
(DISPATCH_BATCH_SQL, set-based, sql/0190: in the order they were held back, each with the
answer it would get as one of that many statements in a row). Every other statement
(throttle counts, follow-up jobs, locales) runs when asked. The whole batch is one
transaction, as before: a failed statement fails the batch, and the runner runs its jobs
again one by one. A batch whose dispatches make no statement but their notification writes
(`one_statement`) needs no BEGIN and COMMIT: its one statement is atomic on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from tenantd.db import Conn, Row
from tenantd.db.core import Statement
from tenantd.notifications import queries

log = logging.getLogger(__name__)

T = TypeVar("T")


class OneStatementOnly(RuntimeError):
    """A batch run without a transaction made a statement besides its notification writes."""


class SharedConn(Conn):
    """A connection several tasks of one batch use in turn; it gathers their dispatches.

    `autocommit`: no transaction is open on `conn`, because the batch was judged to make no
    statement but its one DISPATCH_BATCH_SQL (jobs.py `_one_statement`). If that judgment is
    ever wrong, a statement before the write is refused (nothing is written: the batch fails
    and its jobs run again one by one, each in a transaction); one after the write, which
    has committed, runs on its own rather than be lost, and the misjudgment is logged."""

    def __init__(self, conn: Conn, *, autocommit: bool = False):
        super().__init__(conn.raw, conn.notice_sink)
        self.inner = conn  # the batch's transaction is open on it (unless autocommit)
        self.autocommit = autocommit
        self.in_transaction = True  # nested transaction() calls join that one
        self._turn = asyncio.Lock()
        self._running = 0  # dispatches of the batch not yet finished
        self._held: list[tuple[dict[str, Any], asyncio.Future[Row]]] = []
        self.statements = 0  # DISPATCH_BATCH_SQL statements made (tests)
        self.misjudged = False  # autocommit, and a statement came after the write

    def after_commit(self, callback: Callable[[], None]) -> None:
        """The batch's transaction is the inner connection's."""
        self.inner.after_commit(callback)

    async def run_all(self, calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
        """Run every call side by side; their results or exceptions, in order."""
        self._running = len(calls)

        async def one(call: Callable[[], Awaitable[T]]) -> T:
            try:
                return await call()
            finally:
                self._running -= 1
                await self._release_when_all_held()

        return await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)

    def _refuse_in_autocommit(self) -> None:
        if not self.autocommit:
            return
        if not self.statements:
            raise OneStatementOnly("a one-statement dispatch batch made another statement")
        if not self.misjudged:
            self.misjudged = True
            log.error("a dispatch batch run without a transaction made a second statement")

    async def execute(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        self._refuse_in_autocommit()
        async with self._turn:
            return await self.inner.execute(stmt, params)

    async def fetch_all(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        self._refuse_in_autocommit()
        async with self._turn:
            return await self.inner.fetch_all(stmt, params)

    async def fetch_val(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> Any:
        self._refuse_in_autocommit()
        async with self._turn:
            return await self.inner.fetch_val(stmt, params)

    async def fetch_one(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> Row | None:
        if stmt is not queries.DISPATCH_SQL or params is None:
            self._refuse_in_autocommit()
            async with self._turn:
                return await self.inner.fetch_one(stmt, params)
        payload = params["payload"]
        held = {**params, "payload": getattr(payload, "adapted", payload)}  # unwrap Json
        answer: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
        self._held.append((held, answer))
        await self._release_when_all_held()
        return await answer

    async def _release_when_all_held(self) -> None:
        """Once every running dispatch waits for its notification's write: write them all."""
        if not self._held or len(self._held) < self._running:
            return
        held, self._held = self._held, []
        try:
            async with self._turn:
                rows = await queries.persist_dispatches(self.inner, [p for p, _ in held])
            self.statements += 1
        except Exception as error:
            for _, answer in held:
                if not answer.done():
                    answer.set_exception(error)
            return
        for (_, answer), row in zip(held, rows, strict=True):
            if not answer.done():
                answer.set_result(row)
