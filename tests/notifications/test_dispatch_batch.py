"""A batch of dispatches written by one set-based statement (sql/0190) answers and writes
exactly what the one-send statement (sql/0160) does for the same sends one after another:
recipients, dedup (within the batch too), preferences, account defaults, critical events,
throttled sends, re-runs. And what the write path costs per notification: time-ordered ids,
no index nobody reads."""

from __future__ import annotations

import contextvars
import time
import uuid
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.jobs.kinds import JobInfo
from tenantd.notifications import queries, send
from tenantd.notifications.domain import Notifications
from tenantd.notifications.jobs import run_dispatch_batch
from tenantd.notifications.service import new_notification_id

CHANNELS = ("in_app", "sse", "email")


def sends(run: str, users: dict[str, Any], ids: list[uuid.UUID]) -> list[queries.NewNotification]:
    """Ten sends that exercise every rule; `run` keeps the two runs' dedup keys apart."""
    cases: list[dict[str, Any]] = [
        {"user": "quiet"},  # in_app turned off by the user
        {"user": "owner", "account": True},  # email turned off by the account's default
        {"user": "owner", "dedup": "k1"},
        {"user": "quiet", "dedup": "k1"},  # the second of a key in a row: duplicate
        {"user": None, "dedup": "k2"},  # unknown recipient: claims nothing
        {"user": "owner", "dedup": "k2"},  # so this one claims the key
        {"user": "quiet", "critical": True},  # critical: the user's choice does not apply
        {"user": "owner", "forced": "throttled"},
        {"user": "quiet", "dedup": "live"},  # held by an earlier send
        {"user": "owner", "dedup": "expired"},  # its window ended: taken over
    ]
    made = []
    for index, case in enumerate(cases):
        user = users[case["user"]] if case["user"] else None
        made.append(
            queries.NewNotification(
                notification_id=ids[index],
                user_id=user.id if user else uuid.uuid4(),
                account_id=user.account_id if user and case.get("account") else None,
                event_type="ping.simple",
                title=f"Ping {index}",
                body="pong",
                cta_url="/",
                cta_label="Open",
                payload={"n": index},
                dedup_key=f"{run}:{case['dedup']}" if "dedup" in case else None,
                window_seconds=3600,
                channels=CHANNELS,
                critical=case.get("critical", False),
                forced_reason=case.get("forced"),
            )
        )
    return made


async def prepare(db: Database, factory: Any) -> dict[str, Any]:
    quiet, owner = await factory.user(), await factory.user()
    await db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, channel, enabled)"
        " VALUES (%(u)s, 'ping.simple', 'in_app', false)",
        {"u": quiet.id},
    )
    await db.execute(
        "INSERT INTO notification_account_defaults (account_id, event_type, channel, enabled)"
        " VALUES (%(a)s, 'ping.simple', 'email', false)",
        {"a": owner.account_id},
    )
    for run in ("one", "batch"):
        await db.execute(
            "INSERT INTO notification_dedup (dedup_key, expires_at) VALUES"
            " (%(live)s, now() + interval '1 hour'), (%(gone)s, now() - interval '1 second')",
            {"live": f"{run}:live", "gone": f"{run}:expired"},
        )
    return {"quiet": quiet, "owner": owner}


async def written(db: Database, ids: list[uuid.UUID]) -> list[Any]:
    """Per send: its notification (in_app, title) and delivery rows, or None."""
    out = []
    for notification_id in ids:
        row = await db.fetch_one(
            "SELECT in_app, title, user_id FROM notifications WHERE id = %(id)s",
            {"id": notification_id},
        )
        rows = await db.fetch_all(
            "SELECT channel, status, reason FROM notification_deliveries"
            " WHERE notification_id = %(id)s ORDER BY channel",
            {"id": notification_id},
        )
        out.append((row, [tuple(r.values()) for r in rows]))
    return out


async def announced(db: Database, ids: list[uuid.UUID]) -> list[tuple[str, int]]:
    """The SSE announcements of these sends not yet relayed: channel and send index, in order."""
    rows = await db.fetch_all(
        "SELECT channel, payload FROM announcements WHERE payload = ANY(%(ids)s) ORDER BY id",
        {"ids": [str(i) for i in ids]},
    )
    return [(row["channel"], [str(i) for i in ids].index(row["payload"])) for row in rows]


def answers(rows: list[Any], ids: list[uuid.UUID]) -> list[Any]:
    """The statement's answers with each id as the index of the send it names."""
    return [
        {**row, "id": ids.index(row["id"]) if row["id"] else None, "created_at": None}
        for row in rows
    ]


async def test_a_batch_answers_and_writes_as_sends_one_after_another(
    db: Database, factory: Any
) -> None:
    users = await prepare(db, factory)
    one_ids = [uuid.uuid4() for _ in range(10)]
    batch_ids = [uuid.uuid4() for _ in range(10)]
    one = sends("one", users, one_ids)
    batch = sends("batch", users, batch_ids)
    async with db.transaction() as conn:
        one_rows = [await queries.persist_dispatch(conn, send) for send in one]
    async with db.transaction() as conn:
        batch_rows = await queries.persist_dispatches(
            conn, [queries.dispatch_parameters(send) for send in batch]
        )
    assert answers(batch_rows, batch_ids) == answers(one_rows, one_ids)
    assert await written(db, batch_ids) == await written(db, one_ids)
    created = [row["id"] is not None for row in batch_rows]
    assert created == [True, True, True, False, False, True, True, True, False, True]
    pending = [row["pending"] for row in batch_rows]
    assert pending[1] == [] and pending[0] == ["email"]  # the account default; the user's
    assert [row["published"] for row in batch_rows][:3] == [1, 1, 1]  # one SSE notice each
    keys = await db.fetch_all(
        "SELECT dedup_key FROM notification_dedup WHERE dedup_key LIKE 'batch:%%'"
        " AND created_at = now() ORDER BY 1"
    )
    assert keys == await db.fetch_all(
        "SELECT replace(dedup_key, 'one:', 'batch:') AS dedup_key FROM notification_dedup"
        " WHERE dedup_key LIKE 'one:%%' AND created_at = now() ORDER BY 1"
    )

    # A re-run (the job ran again after a crash) writes nothing and answers "not created".
    async with db.transaction() as conn:
        again = await queries.persist_dispatches(
            conn, [queries.dispatch_parameters(send) for send in batch]
        )
    assert [row["id"] for row in again] == [None] * 10
    assert [row["user_found"] for row in again] == [row["user_found"] for row in batch_rows]
    assert await written(db, batch_ids) == await written(db, one_ids)


@pytest.mark.own_relays  # no relay: the announcements stay to be compared
async def test_a_batch_announces_as_sends_one_after_another(db: Database, factory: Any) -> None:
    users = await prepare(db, factory)
    one_ids = [uuid.uuid4() for _ in range(10)]
    batch_ids = [uuid.uuid4() for _ in range(10)]
    async with db.transaction() as conn:
        for send_ in sends("one", users, one_ids):
            await queries.persist_dispatch(conn, send_)
    async with db.transaction() as conn:
        await queries.persist_dispatches(
            conn, [queries.dispatch_parameters(send_) for send_ in sends("batch", users, batch_ids)]
        )
    one = await announced(db, one_ids)
    assert one == await announced(db, batch_ids)
    assert [index for _, index in one] == [0, 1, 2, 5, 6, 9]  # each created send's SSE notice


async def test_a_dedup_key_twice_in_a_batch_keeps_the_first(db: Database, factory: Any) -> None:
    user = await factory.user()
    ids = [uuid.uuid4() for _ in range(3)]
    batch = [
        queries.NewNotification(
            notification_id=notification_id,
            user_id=user.id,
            account_id=None,
            event_type="ping.simple",
            title=f"Ping {n}",
            body="",
            cta_url="",
            cta_label="",
            payload={"n": n},
            dedup_key="same",
            window_seconds=60,
            channels=("in_app",),
        )
        for n, notification_id in enumerate(ids)
    ]
    async with db.transaction() as conn:
        rows = await queries.persist_dispatches(
            conn, [queries.dispatch_parameters(send) for send in reversed(batch)]
        )
    assert [row["id"] for row in rows] == [ids[2], None, None]  # the first given wins


def next_millisecond() -> None:
    """Return once the clock has moved to the next millisecond (ids order to the ms)."""
    now = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= now:
        pass


@pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])
async def test_notification_ids_are_time_ordered(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    """send() names notifications with UUIDv7s: later ids sort after earlier ones (to the ms),
    so the id indexes grow at their right edge instead of at random leaves."""
    made = [new_notification_id() for _ in range(1000)]
    assert len(set(made)) == 1000 and {i.version for i in made} == {7}
    assert all(i.variant == uuid.RFC_4122 for i in made)
    first = new_notification_id()
    next_millisecond()
    assert new_notification_id() > first
    user = await factory.user()
    outcomes = []
    for n in range(3):
        outcomes.append(
            await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": n})
        )
        next_millisecond()
    ids = [outcome.notification_id for outcome in outcomes]
    assert all(i is not None and i.version == 7 for i in ids)
    assert ids == sorted(ids)  # type: ignore[type-var]


async def test_delivery_rows_are_keyed_by_notification_and_channel(db: Database) -> None:
    """sql/0192: no index on the delivery rows' `id` (no statement uses it); the key is
    (notification_id, channel), unique."""
    indexes = await db.fetch_all(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'notification_deliveries'"
    )
    assert [row["indexdef"].split(" USING ")[1] for row in indexes] == [
        "btree (notification_id, channel)"
    ]
    assert "UNIQUE" in indexes[0]["indexdef"]


def dispatch_job(n: int, user_id: uuid.UUID, event: str = "ping.simple") -> Any:
    payload: dict[str, Any] = {"n": n}
    if event == "comment.created":
        payload = {"actorId": str(uuid.uuid4()), "commentId": f"c{n}", "text": "Hi"}
    body = {
        "notificationId": str(new_notification_id()),
        "eventType": event,
        "recipientUserId": str(user_id),
        "accountId": None,
        "payload": payload,
    }
    return JobInfo(id=n, kind="notifications.dispatch", attempts=1, max_attempts=8), body


@pytest.mark.parametrize("queues_enabled", [True], ids=["queued"])
async def test_a_batch_of_plain_writes_runs_without_begin_and_commit(
    services: Notifications, factory: Any, monkeypatch: Any, queues_enabled: bool
) -> None:
    """In-app and SSE only: one statement, no transaction around it. A batch with an email
    event (its follow-up job commits with the notification) keeps its transaction."""
    user = await factory.user()
    opened: list[str] = []
    # Only what the batch (this task and the tasks it starts) opens: background tasks of the
    # services were started before the flag was set and do not see it.
    in_batch: contextvars.ContextVar[bool] = contextvars.ContextVar("in_batch", default=False)
    transaction, connection = services.db.transaction, services.db.connection

    def opening(kind: str, open_: Any) -> Any:
        if in_batch.get():
            opened.append(kind)
        return open_()

    monkeypatch.setattr(services.db, "transaction", lambda: opening("transaction", transaction))
    monkeypatch.setattr(services.db, "connection", lambda: opening("connection", connection))
    in_batch.set(True)
    plain = [dispatch_job(n, user.id) for n in range(5)]
    assert await run_dispatch_batch(services, plain) == [None] * 5
    assert "connection" in opened and "transaction" not in opened, opened
    opened.clear()
    mixed = [dispatch_job(5, user.id), dispatch_job(6, user.id, "comment.created")]
    assert await run_dispatch_batch(services, mixed) == [None, None]
    assert "transaction" in opened
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 7
    emails = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE kind = 'notifications.email'"
    )
    assert emails == 1


@pytest.mark.parametrize("queues_enabled", [True], ids=["queued"])
async def test_a_batch_misjudged_as_one_statement_loses_nothing(
    services: Notifications, factory: Any, monkeypatch: Any, queues_enabled: bool
) -> None:
    """Should a batch judged to need no transaction make another statement: before its
    write (here a locale read) the statement is refused, nothing is written by the batch, and
    each job runs again alone; after its write (an email job) it still runs."""
    from tenantd.notifications import dispatch_batch, jobs, service

    monkeypatch.setattr(jobs, "_one_statement", lambda _services, _payload: True)
    batches: list[int] = []
    original = dispatch_batch.queries.persist_dispatches

    async def counted(conn: Any, parameters: Any) -> Any:
        batches.append(len(parameters))
        return await original(conn, parameters)

    monkeypatch.setattr(dispatch_batch.queries, "persist_dispatches", counted)
    user = await factory.user()
    with monkeypatch.context() as patched:
        patched.setattr(service, "wants_locale", lambda _function: True)
        before = [dispatch_job(1, user.id), dispatch_job(2, user.id)]
        assert await run_dispatch_batch(services, before) == [None, None]
    assert batches == []  # refused before the batch's write; each ran alone
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 2
    after = [dispatch_job(3, user.id), dispatch_job(4, user.id, "comment.created")]
    assert await run_dispatch_batch(services, after) == [None, None]
    assert batches == [2]
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 4
    emails = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE kind = 'notifications.email'"
    )
    assert emails == 1
