"""Provider A's send-time verdict, end to end: the app's EmailService against a fake Postmark."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.email.message import EmailMessage, EmailSendError
from tests.email.fake_providers import POSTMARK_TOKEN, FakeProviders
from tests.email.support import Start


async def postmark_app(start: Start, fake: FakeProviders) -> Any:
    client = await start(
        EMAIL_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN=POSTMARK_TOKEN,
        POSTMARK_API_URL=fake.url,
        EMAIL_FROM="tenantd <no-reply@example.com>",
    )
    return client.server.app[DOMAINS]


async def test_406_mirrors_the_inactive_addresses_and_the_next_send_short_circuits(
    start: Start, fake: FakeProviders, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    services = await postmark_app(start, fake)
    fake.postmark_inactive("a@b.com", "c@d.com")
    caplog.set_level(logging.INFO, logger="tenantd.email")

    result = await services.email.send(EmailMessage(to="a@b.com", subject="Hi", text="x"))

    assert (result.status, result.reason) == ("suppressed", "inactive")
    rows = await db.fetch_all(
        "SELECT email, reason, provider, details FROM email_suppressions ORDER BY email"
    )
    assert rows == [
        {
            "email": "a@b.com",
            "reason": "inactive",
            "provider": "postmark",
            "details": {"source": "send"},
        },
        {
            "email": "c@d.com",
            "reason": "inactive",
            "provider": "postmark",
            "details": {"source": "send"},
        },
    ]
    recorded = [r for r in caplog.records if r.getMessage() == "email suppression recorded"]
    assert [(r.provider, r.reason) for r in recorded] == [("postmark", "inactive")] * 2
    assert len(fake.sent("postmark")) == 1

    # Both addresses now short-circuit without touching the provider.
    for to in ("a@b.com", " c@D.COM "):
        again = await services.email.send(EmailMessage(to=to, subject="Hi", text="x"))
        assert (again.status, again.reason) == ("suppressed", "inactive")
    assert len(fake.sent("postmark")) == 1


async def test_406_with_an_unreadable_message_suppresses_the_recipient(
    start: Start, fake: FakeProviders, db: Database
) -> None:
    services = await postmark_app(start, fake)
    fake.postmark_inactive(message="Inactive recipient.")
    result = await services.email.send(EmailMessage(to="Zed@Example.COM", subject="s", text="t"))
    assert result.status == "suppressed"
    rows = await db.fetch_all("SELECT email, reason, provider FROM email_suppressions")
    assert rows == [{"email": "zed@example.com", "reason": "inactive", "provider": "postmark"}]


async def test_406_keeps_an_existing_row(start: Start, fake: FakeProviders, db: Database) -> None:
    services = await postmark_app(start, fake)
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('c@d.com', 'complaint', 'sendgrid')"
    )
    fake.postmark_inactive("a@b.com", "c@d.com")
    await services.email.send(EmailMessage(to="a@b.com", subject="s", text="t"))
    rows = await db.fetch_all("SELECT email, reason, provider FROM email_suppressions ORDER BY 1")
    assert rows == [
        {"email": "a@b.com", "reason": "inactive", "provider": "postmark"},
        {"email": "c@d.com", "reason": "complaint", "provider": "sendgrid"},
    ]


async def test_a_template_send_goes_through_postmark(start: Start, fake: FakeProviders) -> None:
    services = await postmark_app(start, fake)
    result = await services.email.send_template(
        to="new@example.com",
        template="verify_email",
        variables={
            "link": "http://127.0.0.1:8080/verify-email?token=T",
            "first_name": "Ada",
            "ttl_hours": 24,
        },
    )
    assert result.status == "sent" and result.message_id
    [request] = fake.sent("postmark")
    assert request.json["To"] == "new@example.com"
    assert request.json["From"] == "tenantd <no-reply@example.com>"
    assert "verify-email?token=T" in request.json["TextBody"]
    assert request.json["Tag"] == "verify_email"


async def test_other_422_errors_create_no_row(
    start: Start, fake: FakeProviders, db: Database
) -> None:
    services = await postmark_app(start, fake)
    fake.fail("postmark", 422, body={"ErrorCode": 300, "Message": "Invalid 'To' address."})
    with pytest.raises(EmailSendError) as raised:
        await services.email.send(EmailMessage(to="a@b.com", subject="s", text="t"))
    assert raised.value.retryable is False
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 0
