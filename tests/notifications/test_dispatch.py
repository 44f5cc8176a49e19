"""send() and the dispatch worker: validation, guard, dedup, preferences, delivery rows,
both queue modes, caller transactions, idempotency."""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from typing import Any

import pytest

from tenantd.app.bundle import build_services
from tenantd.db import Conn
from tenantd.email.message import EmailSendError
from tenantd.errors import ValidationFailed
from tenantd.notifications import InvalidPayload, UnknownEventType, UnknownRecipient, send
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.notifications.service import dispatch
from tests.factories import mail_text, read_mails
from tests.helpers import eventually
from tests.notifications.support import deliveries, quiesce

SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("sending", default=False)

BOTH_MODES = pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])


def comment(actor: Any = None, comment_id: str = "c1", text: str = "Nice work") -> dict[str, Any]:
    return {"actorId": str(actor or uuid.uuid4()), "commentId": comment_id, "text": text}


async def count(services: Notifications, sql: str, **params: Any) -> int:
    value: int = await services.db.fetch_val(sql, params or None)
    return value


@BOTH_MODES
async def test_send_persists_notification_and_one_row_per_channel(
    services: Notifications, factory: Any, mail_dir: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    outcome = await send(
        services, "comment.created", recipient_user_id=user.id, payload=comment(text="Hello")
    )
    assert outcome.status == ("queued" if queues_enabled else "created")
    await quiesce(services)
    row = await services.db.fetch_one(
        "SELECT * FROM notifications WHERE id = %(id)s", {"id": outcome.notification_id}
    )
    assert row is not None
    assert (row["title"], row["body"], row["cta_url"], row["cta_label"]) == (
        "New comment",
        "Hello",
        "/c/c1",
        "Open",
    )
    assert row["status"] == "unread" and row["user_id"] == user.id
    # web_push has no row: the VAPID variables are unset, so that channel does not exist.
    assert await deliveries(services, outcome.notification_id) == {
        "in_app": ("sent", None),
        "email": ("sent", None),
        "sse": ("sent", None),
    }
    mails = read_mails(mail_dir)
    assert len(mails) == 1
    assert mails[0]["To"] == user.email
    assert mails[0]["Subject"] == "New comment"
    assert "Someone commented: Hello" in mail_text(mails[0])


@pytest.mark.parametrize("sse_enabled", [False])
async def test_switched_off_channels_get_no_row(services: Notifications, factory: Any) -> None:
    user = await factory.user()
    outcome = await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert set(await deliveries(services, outcome.notification_id)) == {"in_app", "email"}


@BOTH_MODES
async def test_invalid_payload_names_fields_and_writes_nothing(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    with pytest.raises(InvalidPayload) as raised:
        await send(
            services,
            "comment.created",
            recipient_user_id=user.id,
            payload={"actorId": 5, "text": ""},
        )
    assert isinstance(raised.value, ValidationFailed)
    assert set(raised.value.fields) == {"actorId", "commentId", "text"}
    assert await count(services, "SELECT count(*) FROM notifications") == 0
    assert await count(services, "SELECT count(*) FROM jobs") == 0


@BOTH_MODES
async def test_unknown_event_type_and_recipient(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    with pytest.raises(UnknownEventType):
        await send(services, "nope.never", recipient_user_id=user.id, payload={})
    with pytest.raises(UnknownRecipient):
        await send(services, "comment.created", recipient_user_id=uuid.uuid4(), payload=comment())
    with pytest.raises(ValidationFailed):
        await send(services, "comment.created", recipient_user_id="not-a-uuid", payload=comment())
    assert await count(services, "SELECT count(*) FROM jobs") == 0


@pytest.mark.parametrize("queues_enabled", [True], ids=["queued"])
async def test_a_queued_send_is_one_statement_known_recipient_or_not(
    services: Notifications, factory: Any, monkeypatch: pytest.MonkeyPatch, queues_enabled: bool
) -> None:
    user = await factory.user(password=None)
    statements: list[str] = []
    # The job runner polls from tasks of its own; the send's statement may run in a task the
    # send started (the group commit), which inherits this context.
    SENDING.set(True)
    for name in ("execute", "fetch_all", "fetch_one", "fetch_val"):
        original = getattr(Conn, name)

        def spy(self: Conn, stmt: Any, params: Any = None, *, _original: Any = original) -> Any:
            if SENDING.get():
                statements.append(str(getattr(stmt, "sql", stmt))[:40])
            return _original(self, stmt, params)

        monkeypatch.setattr(Conn, name, spy)
    outcome = await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    assert outcome.status == "queued"
    assert len(statements) == 1, statements  # the job row, written only if the user exists
    with pytest.raises(UnknownRecipient):
        await send(services, "comment.created", recipient_user_id=uuid.uuid4(), payload=comment())
    assert len(statements) == 2, statements
    monkeypatch.undo()
    rows = await services.db.fetch_all(
        "SELECT payload FROM jobs WHERE kind = 'notifications.dispatch'"
    )
    assert [r["payload"]["recipientUserId"] for r in rows] == [str(user.id)]


@BOTH_MODES
async def test_self_action_guard_skips(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment(user.id))
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 0
    other = await factory.user()
    await send(services, "comment.created", recipient_user_id=other.id, payload=comment(user.id))
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 1


@BOTH_MODES
async def test_dedup_drops_duplicates_inside_the_window_and_reuses_expired_keys(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 1
    # Another comment id is another key.
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment(None, "c2"))
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 2
    # Once the window has passed, the same key notifies again (the expired row is reused).
    await services.db.execute("UPDATE notification_dedup SET expires_at = now() - interval '1s'")
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 3
    assert await count(services, "SELECT count(*) FROM notification_dedup") == 2


@BOTH_MODES
async def test_fifty_concurrent_identical_sends_make_one_notification(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    payload = comment(comment_id="race")
    await asyncio.gather(
        *(
            send(services, "comment.created", recipient_user_id=user.id, payload=payload)
            for _ in range(50)
        )
    )
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 1
    assert await count(services, "SELECT count(*) FROM notification_deliveries") == 3


async def test_concurrent_dispatch_workers_race_safely(
    services: Notifications, factory: Any
) -> None:
    """The dedup insert-or-skip is one statement: 50 workers, 50 connections, one winner."""
    user = await factory.user()
    from tenantd.db.core import create_database
    from tenantd.db.dsn import url_to_dsn

    assert services.settings.database.url is not None
    wide = await create_database(url_to_dsn(services.settings.database.url), minsize=1, maxsize=50)
    try:
        wide_services = build_services(
            services.settings,
            db=wide,
            http=services.http,
            email=services.email,
            registry=services.registry,
        ).notifications
        results = await asyncio.gather(
            *(
                dispatch(
                    wide_services,
                    notification_id=uuid.uuid4(),
                    event_type="comment.created",
                    recipient_user_id=user.id,
                    payload=comment(comment_id="wide"),
                )
                for _ in range(50)
            )
        )
        await wide_services.jobs.drain(10)
    finally:
        await wide.close()
    assert sorted(r.status for r in results).count("created") == 1
    assert await count(services, "SELECT count(*) FROM notifications") == 1


@BOTH_MODES
async def test_disabled_channel_gets_a_suppressed_row(
    services: Notifications, factory: Any, mail_dir: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    await services.db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, channel, enabled)"
        " VALUES (%(u)s, 'comment.created', 'email', false),"
        "        (%(u)s, 'comment.created', 'sse', false)",
        {"u": user.id},
    )
    outcome = await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert await deliveries(services, outcome.notification_id) == {
        "in_app": ("sent", None),
        "email": ("suppressed", "preference_disabled"),
        "sse": ("suppressed", "preference_disabled"),
    }
    assert read_mails(mail_dir) == []
    # Another user keeps the default (enabled).
    other = await factory.user()
    outcome = await send(services, "comment.created", recipient_user_id=other.id, payload=comment())
    await quiesce(services)
    assert (await deliveries(services, outcome.notification_id))["email"] == ("sent", None)


async def test_disabled_in_app_hides_the_notification_from_the_inbox(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user()
    await services.db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, channel, enabled)"
        " VALUES (%(u)s, 'ping.simple', 'in_app', false)",
        {"u": user.id},
    )
    outcome = await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    assert await deliveries(services, outcome.notification_id) == {
        "in_app": ("suppressed", "preference_disabled"),
        "sse": ("sent", None),
    }
    hidden = await services.db.fetch_val(
        "SELECT in_app FROM notifications WHERE id = %(id)s", {"id": outcome.notification_id}
    )
    assert hidden is False


@BOTH_MODES
async def test_suppressed_address_settles_email_suppressed_with_reason(
    services: Notifications, factory: Any, mail_dir: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    await services.db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES (%(e)s, 'hard_bounce', 'resend')",
        {"e": user.email},
    )
    outcome = await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "Q3", "rows": 3}
    )
    await quiesce(services)
    assert (await deliveries(services, outcome.notification_id))["email"] == (
        "suppressed",
        "hard_bounce",
    )
    assert read_mails(mail_dir) == []


class FailingSender:
    name = "failing"

    def __init__(self, *, retryable: bool):
        self.retryable = retryable
        self.calls = 0

    async def send(self, message: Any, *, sender: str) -> str | None:
        self.calls += 1
        raise EmailSendError("provider answered 503", retryable=self.retryable)


async def settled_email(services: Notifications, notification_id: Any) -> tuple[str, Any]:
    """The email delivery once settled: the job row reads failed a moment before give-up
    settles the delivery, so quiescing the queue alone can look too early."""

    async def settled() -> bool:
        row = (await deliveries(services, notification_id)).get("email")
        return row is not None and row[0] != "pending"

    await eventually(settled)
    return (await deliveries(services, notification_id))["email"]


@BOTH_MODES
async def test_provider_errors_retry_then_settle_failed(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    failing = FailingSender(retryable=True)
    services.email.sender = failing
    user = await factory.user()
    outcome = await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "Q3", "rows": 3}
    )
    await quiesce(services)
    status, reason = await settled_email(services, outcome.notification_id)
    assert status == "failed"
    assert "503" in reason
    assert failing.calls == 8  # EMAIL_ATTEMPTS
    if queues_enabled:
        job = await services.db.fetch_one(
            "SELECT status, attempts FROM jobs WHERE kind = 'notifications.email'"
        )
        assert job == {"status": "failed", "attempts": 8}


@BOTH_MODES
async def test_permanent_provider_error_fails_at_once(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    failing = FailingSender(retryable=False)
    services.email.sender = failing
    user = await factory.user()
    outcome = await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "Q3", "rows": 3}
    )
    await quiesce(services)
    assert (await settled_email(services, outcome.notification_id))[0] == "failed"
    assert failing.calls == 1


@pytest.mark.parametrize("queues_enabled", [True])
async def test_queued_send_joins_the_callers_transaction(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user()
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as conn:
            await send(
                services, "ping.simple", recipient_user_id=user.id, payload={"n": 1}, conn=conn
            )
            assert await conn.fetch_val("SELECT count(*) FROM jobs") == 1
            raise RuntimeError("caller rolls back")
    await asyncio.sleep(0.2)
    assert await count(services, "SELECT count(*) FROM jobs") == 0
    assert await count(services, "SELECT count(*) FROM notifications") == 0
    async with services.db.transaction() as conn:
        await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": 2}, conn=conn)
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 1


@pytest.mark.parametrize("queues_enabled", [True])
async def test_rolled_back_dispatch_queues_no_follow_up_job(
    services: Notifications, factory: Any
) -> None:
    """The email job is written by the job queue in the notification's transaction."""
    user = await factory.user()
    notification_id = uuid.uuid4()
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as conn:
            await dispatch(
                services,
                notification_id=notification_id,
                event_type="report.ready",
                recipient_user_id=user.id,
                payload={"reportName": "Q3", "rows": 3},
                conn=conn,
            )
            queued = await conn.fetch_val(
                "SELECT count(*) FROM jobs WHERE kind = 'notifications.email'"
            )
            assert queued == 1
            raise RuntimeError("the batch rolls back")
    assert await count(services, "SELECT count(*) FROM jobs") == 0
    assert await count(services, "SELECT count(*) FROM notifications") == 0


async def test_inline_send_in_callers_transaction_delivers_email_after_commit(
    services: Notifications, factory: Any, mail_dir: Any
) -> None:
    user = await factory.user()
    payload = {"reportName": "R", "rows": 1}
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as conn:
            await send(
                services, "report.ready", recipient_user_id=user.id, payload=payload, conn=conn
            )
            raise RuntimeError("caller rolls back")
    await quiesce(services)
    assert await count(services, "SELECT count(*) FROM notifications") == 0
    assert read_mails(mail_dir) == []
    async with services.db.transaction() as conn:
        outcome = await send(
            services, "report.ready", recipient_user_id=user.id, payload=payload, conn=conn
        )
        # The email task waits for this transaction; nothing is sent before the commit.
        await asyncio.sleep(0.2)
        assert read_mails(mail_dir) == []
    await quiesce(services)
    assert (await deliveries(services, outcome.notification_id))["email"] == ("sent", None)
    assert len(read_mails(mail_dir)) == 1


async def test_dispatch_is_idempotent_on_the_notification_id(
    services: Notifications, factory: Any, mail_dir: Any
) -> None:
    """A job that runs again after a crash (done, but not marked done) delivers once."""
    user = await factory.user()
    notification_id = uuid.uuid4()
    first = await dispatch(
        services,
        notification_id=notification_id,
        event_type="ping.simple",
        recipient_user_id=user.id,
        payload={"n": 1},
    )
    second = await dispatch(
        services,
        notification_id=notification_id,
        event_type="ping.simple",
        recipient_user_id=user.id,
        payload={"n": 1},
    )
    assert (first.status, second.status) == ("created", "duplicate")
    assert await count(services, "SELECT count(*) FROM notifications") == 1
    assert await count(services, "SELECT count(*) FROM notification_deliveries") == 2


async def test_email_job_runs_once_per_delivery(
    services: Notifications, factory: Any, mail_dir: Any
) -> None:
    from tenantd.jobs.kinds import JobInfo
    from tenantd.notifications.channels.email import run_email_job

    user = await factory.user()
    outcome = await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "R", "rows": 1}
    )
    await quiesce(services)
    info = JobInfo(id=None, kind="notifications.email", attempts=1, max_attempts=8)
    await run_email_job(services, {"notificationId": str(outcome.notification_id)}, info)
    assert len(read_mails(mail_dir)) == 1


async def test_send_through_the_applications_domain(app: Any, factory: Any) -> None:
    user = await factory.user()
    outcome = await send(
        notifications_of(app), "ping.simple", recipient_user_id=str(user.id), payload={"n": 3}
    )
    assert outcome.status == "created"


async def test_send_does_not_wait_for_email_delivery(services: Notifications, factory: Any) -> None:
    release = asyncio.Event()

    class SlowSender:
        name = "slow"

        async def send(self, message: Any, *, sender: str) -> str | None:
            await release.wait()
            return "id"

    services.email.sender = SlowSender()
    user = await factory.user()
    outcome = await asyncio.wait_for(
        send(
            services,
            "report.ready",
            recipient_user_id=user.id,
            payload={"reportName": "R", "rows": 1},
        ),
        timeout=30,  # the sender never answers before `release`: any bound tells the two apart
    )
    assert (await deliveries(services, outcome.notification_id))["email"] == ("pending", None)
    release.set()

    async def settled() -> bool:
        return (await deliveries(services, outcome.notification_id))["email"][0] == "sent"

    await eventually(settled)
