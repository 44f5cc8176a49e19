"""Many dispatches at once, their notifications written by one statement: the explicit batch
entry point (`dispatch_many`) of the dispatch job's batches.

`dispatch` writes a notification with one statement (DISPATCH_SQL): 16 dispatches one after
another cost 16 round trips. Here each dispatch is prepared in turn (validation, guard,
throttle count, locale: `prepare_dispatch`), then every prepared notification is written by
one statement (DISPATCH_BATCH_SQL, set-based, sql/functions/notification_dispatch.sql: in
the order given, each with the answer it would get as one of that many statements in a
row), then each one's follow-up jobs are enqueued (`settle_dispatch`). The caller owns the
transaction: a failed statement fails the batch, and the job runner runs its jobs again one
by one. A batch whose dispatches make no statement but their notification writes
(`one_statement`) needs no BEGIN and COMMIT: its one statement is atomic on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tenantd.db import Conn
from tenantd.errors import NotFound, ValidationFailed
from tenantd.notifications import queries
from tenantd.notifications.service import (
    Dispatch,
    ReadyDispatch,
    SendOutcome,
    StatementRefused,
    count_throttle,
    prepare_dispatch,
    settle_dispatch,
)

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications

log = logging.getLogger(__name__)

# What a dispatch of a batch is refused for: its input (gone recipient or event type, a
# payload that no longer validates). Anything else fails the whole batch.
Refused = NotFound | ValidationFailed


async def dispatch_many(
    services: Notifications,
    conn: Conn,
    sends: Sequence[Dispatch],
    *,
    one_statement: bool = False,
) -> list[SendOutcome | Refused]:
    """Dispatch every send on `conn` (the caller's transaction), the notifications written by
    one statement: per send, the outcome `dispatch` would give it, or the error its input
    was refused for. `one_statement`: `conn` is outside a transaction because the sends were
    judged to make no statement but the write; one that would is refused before anything is
    written (StatementRefused), and a follow-up job after the write is still enqueued (and
    the misjudgment logged)."""
    results: list[SendOutcome | Refused | None] = [None] * len(sends)
    ready: list[tuple[int, ReadyDispatch]] = []
    for index, send in enumerate(sends):
        try:
            step = await prepare_dispatch(services, send, conn=conn, statements=not one_statement)
        except (NotFound, ValidationFailed) as error:
            results[index] = error
            continue
        if isinstance(step, SendOutcome):
            results[index] = step
        else:
            ready.append((index, await count_throttle(conn, step)))
    if ready:
        rows = await queries.persist_dispatches(
            conn, [queries.dispatch_parameters(step.notification) for _, step in ready]
        )
        misjudged = False
        for (index, step), row in zip(ready, rows, strict=True):
            if one_statement and row["pending"] and not misjudged:
                misjudged = True
                log.error("a dispatch batch run without a transaction made a second statement")
            try:
                results[index] = await settle_dispatch(services, conn, step, row)
            except (NotFound, ValidationFailed) as error:
                results[index] = error
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


__all__ = ["Dispatch", "Refused", "StatementRefused", "dispatch_many"]
