"""The group commit of one-off job rows (jobs/coalesce.py): callers that overlap share a
statement, each gets its own row's id (None: no such user), and a bad row fails alone."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from psycopg2 import DataError

from tenantd.db import Database
from tenantd.jobs.coalesce import CoalescingWriter
from tenantd.notifications import UnknownRecipient, send


async def _user(db: Database) -> uuid.UUID:
    user_id = uuid.uuid4()
    await db.execute(
        "INSERT INTO users (id, email) VALUES (%(id)s, %(e)s)",
        {"id": user_id, "e": f"{user_id.hex}@example.com"},
    )
    return user_id


def _enqueue(writer: CoalescingWriter, user_id: uuid.UUID, n: int) -> Any:
    return writer.write_for_user(
        kind="test.kind", payload={"n": n}, max_attempts=3, user_id=user_id
    )


async def test_overlapping_callers_share_statements_and_each_gets_its_row(db: Database) -> None:
    users = [await _user(db) for _ in range(4)]
    woken: list[bool] = []
    writer = CoalescingWriter(db, on_written=lambda: woken.append(True))
    nobody = uuid.uuid4()
    recipients = [nobody if n % 7 == 3 else users[n % 4] for n in range(60)]
    ids = await asyncio.gather(*(_enqueue(writer, user, n) for n, user in enumerate(recipients)))
    assert writer.statements < 10  # 60 callers, not 60 statements
    assert woken
    rows = await db.fetch_all("SELECT id, payload, max_attempts, status FROM jobs")
    by_id = {row["id"]: row for row in rows}
    assert len(rows) == sum(1 for user in recipients if user != nobody)
    for n, (user, job_id) in enumerate(zip(recipients, ids, strict=True)):
        if user == nobody:
            assert job_id is None  # unknown recipient: nothing written
            continue
        assert job_id is not None
        assert by_id[job_id]["payload"] == {"n": n}  # each caller gets its own row
        assert (by_id[job_id]["max_attempts"], by_id[job_id]["status"]) == (3, "queued")


async def test_an_idle_caller_waits_for_no_one(db: Database) -> None:
    user = await _user(db)
    writer = CoalescingWriter(db)
    assert await _enqueue(writer, user, 1) is not None
    assert await _enqueue(writer, user, 2) is not None
    assert writer.statements == 2


async def test_a_bad_row_fails_alone(db: Database) -> None:
    user = await _user(db)
    writer = CoalescingWriter(db)
    bad = writer.write_for_user(
        kind="test.kind", payload={"text": "\u0000"}, max_attempts=3, user_id=user
    )  # jsonb refuses NUL characters
    results = await asyncio.gather(
        *(_enqueue(writer, user, n) for n in range(10)), bad, return_exceptions=True
    )
    assert isinstance(results[-1], DataError)
    assert all(isinstance(job_id, int) for job_id in results[:-1])
    payloads = await db.fetch_all("SELECT payload FROM jobs ORDER BY id")
    assert sorted(row["payload"]["n"] for row in payloads) == list(range(10))


async def test_concurrent_sends_queue_every_dispatch_once(services: Any, factory: Any) -> None:
    user = await factory.user()
    payload = {"actorId": str(uuid.uuid4()), "commentId": "c1", "text": "Hi"}
    outcomes = await asyncio.gather(
        *(
            send(
                services.notifications,
                "comment.created",
                recipient_user_id=user.id,
                payload=payload,
            )
            for _ in range(40)
        ),
        send(
            services.notifications,
            "comment.created",
            recipient_user_id=uuid.uuid4(),
            payload=payload,
        ),
        return_exceptions=True,
    )
    assert isinstance(outcomes[-1], UnknownRecipient)
    ids = {outcome.notification_id for outcome in outcomes[:-1]}
    assert len(ids) == 40
    queued = await services.db.fetch_all(
        "SELECT payload->>'notificationId' AS id FROM jobs WHERE kind = 'notifications.dispatch'"
    )
    assert {uuid.UUID(row["id"]) for row in queued} == ids
