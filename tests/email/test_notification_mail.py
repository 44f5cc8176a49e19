"""Notification emails on the wire (the fake Resend): one idempotency key per delivery, links
a mail client can follow, a text part without the HTML <title>."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tenantd.app.bundle import Domains
from tenantd.db import Database
from tenantd.jobs.kinds import JobInfo
from tenantd.notifications import send
from tenantd.notifications.channels.email import run_email_job
from tests.email.fake_providers import RESEND_KEY, FakeProviders, Recorded
from tests.email.support import Start
from tests.factories import Factory
from tests.helpers import eventually

BASE = "https://app.example.com/portal"
TITLE = "Your weekly digest"


@pytest.fixture
async def client(start: Start, fake: FakeProviders) -> TestClient[Any, Any]:
    return await start(
        EMAIL_PROVIDER="resend",
        RESEND_API_KEY=RESEND_KEY,
        RESEND_API_URL=fake.url,
        PUBLIC_BASE_URL=BASE,
        TENANTD_EVENT_MODULES="tests.email.notification_events",
        QUEUES_ENABLED="false",
    )


@pytest.fixture
def app(client: TestClient[Any, Any]) -> web.Application:
    """The app under test is the one `client` started (so `services` are its services)."""
    return client.server.app


async def email_status(db: Database, notification_id: uuid.UUID) -> str | None:
    status: str | None = await db.fetch_val(
        "SELECT status FROM notification_deliveries"
        " WHERE notification_id = %(id)s AND channel = 'email'",
        {"id": notification_id},
    )
    return status


async def settled(db: Database, notification_id: uuid.UUID) -> str:
    """Wait until the email delivery leaves `pending`; its status."""

    async def left_pending() -> str | None:
        status = await email_status(db, notification_id)
        return None if status in (None, "pending") else status

    result: str = await eventually(left_pending)
    return result


async def mail_of(
    services: Domains, db: Database, fake: FakeProviders, event: str, payload: dict[str, Any]
) -> tuple[uuid.UUID, Recorded]:
    user = await Factory(db, services.settings).user()
    outcome = await send(services.notifications, event, recipient_user_id=user.id, payload=payload)
    assert outcome.notification_id is not None
    assert await settled(db, outcome.notification_id) == "sent"
    [request] = fake.sent("resend")
    return outcome.notification_id, request


# --- 13b: a re-run job does not mail twice ----------------------------------------------------


async def test_a_rerun_of_one_delivery_sends_the_same_key_and_mails_once(
    services: Domains, db: Database, fake: FakeProviders
) -> None:
    payload = {"actorId": str(uuid.uuid4()), "commentId": "1", "text": "Nice"}
    notification_id, first = await mail_of(services, db, fake, "comment.created", payload)
    key = first.headers["Idempotency-Key"]
    assert key == f"notification/{notification_id}/email"
    # The worker died after Resend accepted the mail, before the delivery row was settled:
    # the lease runs out and the job runs again.
    await db.execute(
        "UPDATE notification_deliveries SET status = 'pending'"
        " WHERE notification_id = %(id)s AND channel = 'email'",
        {"id": notification_id},
    )
    rerun = JobInfo(id=None, kind="notifications.email", attempts=2, max_attempts=8)
    await run_email_job(services.notifications, {"notificationId": str(notification_id)}, rerun)
    assert [r.headers["Idempotency-Key"] for r in fake.sent("resend")] == [key, key]
    assert len(fake.delivered) == 1  # the provider answered the replay without sending
    assert await email_status(db, notification_id) == "sent"


async def test_two_deliveries_get_two_keys(
    services: Domains, db: Database, fake: FakeProviders
) -> None:
    user = await Factory(db, services.settings).user()
    for comment_id in ("1", "2"):
        payload = {"actorId": str(uuid.uuid4()), "commentId": comment_id, "text": "Hi"}
        outcome = await send(
            services.notifications,
            "comment.created",
            recipient_user_id=user.id,
            payload=payload,
        )
        assert outcome.notification_id is not None
        assert await settled(db, outcome.notification_id) == "sent"
    keys = {r.headers["Idempotency-Key"] for r in fake.sent("resend")}
    assert len(keys) == 2 and len(fake.delivered) == 2


# --- 23: links and the text part --------------------------------------------------------------


async def test_a_relative_cta_url_becomes_a_link_under_public_base_url(
    services: Domains, db: Database, fake: FakeProviders
) -> None:
    payload = {"actorId": str(uuid.uuid4()), "commentId": "1", "text": "Nice"}
    _, request = await mail_of(services, db, fake, "comment.created", payload)
    text = request.json["text"]
    assert f"Open it: {BASE}/c/1\n" in text
    # The in-app notification keeps the relative path the application gave.
    stored = await db.fetch_val("SELECT cta_url FROM notifications")
    assert stored == "/c/1"


async def test_relative_links_of_an_html_template_are_resolved_in_html_and_text(
    services: Domains, db: Database, fake: FakeProviders
) -> None:
    payload = {"title": TITLE, "commentId": "7"}
    _, request = await mail_of(services, db, fake, "digest.ready", payload)
    markup, text = request.json["html"], request.json["text"]
    assert f'href="{BASE}/c/7"' in markup
    assert f'href="{BASE}/settings/notifications?tab=email&amp;from=digest"' in markup
    assert f"href='{BASE}/help'" in markup
    assert f'src="{BASE}/static/logo.png"' in markup
    # Absolute links, other schemes and in-document anchors are left alone.
    assert 'href="https://example.org/elsewhere"' in markup
    assert 'href="mailto:support@example.org"' in markup
    assert 'href="#top"' in markup
    assert f"Read them ({BASE}/c/7)" in text
    assert f"Settings ({BASE}/settings/notifications?tab=email&from=digest)" in text
    assert f"Help ({BASE}/help)" in text
    # The body's link opens the hosted confirmation page (the header keeps the API route).
    assert f"{BASE}/unsubscribe?token=" in text


async def test_the_text_part_of_an_html_template_leaves_the_title_out(
    services: Domains, db: Database, fake: FakeProviders
) -> None:
    payload = {"title": TITLE, "commentId": "7"}
    _, request = await mail_of(services, db, fake, "digest.ready", payload)
    text = request.json["text"]
    # The <title> is not text a reader sees; the <h1> that repeats it is, once, first.
    assert text.count(TITLE) == 1
    assert text.splitlines()[0] == TITLE
    assert "color" not in text  # nor the <style>
