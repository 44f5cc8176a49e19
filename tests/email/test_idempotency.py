"""Every provider gets the idempotency key it can use (issue 26): the sent-marker for Postmark,
SendGrid and SMTP (a second send of a key already on record does not call the provider; one
whose answer never came is sent again, the one case that can repeat); SendGrid carries the key
in `custom_args`; the `file` provider writes a keyed message once; a mail job keys its mail by
its own id."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import aiohttp
import psycopg2
import pytest

from tenantd.app.bundle import open_services
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.email.message import EmailMessage, job_mail_key, keyed
from tenantd.email.providers.file import FileSender
from tenantd.email.providers.postmark import PostmarkSender
from tenantd.email.providers.retry import RetryPolicy
from tenantd.email.providers.sendgrid import SendGridSender
from tenantd.email.providers.smtp import SmtpSender, parse_url
from tenantd.email.service import EmailService
from tenantd.ops.sweeps import run_sweep
from tenantd.settings import Settings
from tenantd.suppression import service as suppression
from tests.email.fake_providers import POSTMARK_TOKEN, SENDGRID_KEY, FakeProviders
from tests.email.fake_smtp import FakeSmtp
from tests.helpers import eventually

SENDER = "tenantd <no-reply@example.com>"
MESSAGE = EmailMessage(
    to="bob@example.com", subject="Hi", text="body", idempotency_key="notification/7/email"
)


def service(db: Database, sender: object) -> EmailService:
    return EmailService(db=db, sender=sender, sender_address=SENDER, blocklist=suppression)  # type: ignore[arg-type]


async def marker(db: Database) -> dict[str, object] | None:
    return await db.fetch_one("SELECT key, provider, state, attempts, message_id FROM email_sends")


async def test_postmark_a_key_on_record_is_not_sent_again(
    db: Database, fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy
) -> None:
    sender = PostmarkSender(http, token=POSTMARK_TOKEN, base_url=fake.url, retry=policy)
    mail = service(db, sender)
    first = await mail.send(MESSAGE)
    again = await mail.send(replace(MESSAGE, text="rendered again"))
    assert first.status == again.status == "sent"
    assert again.message_id == first.message_id
    assert len(fake.delivered) == 1
    row = await marker(db)
    assert row is not None
    assert (row["provider"], row["state"], row["attempts"]) == ("postmark", "sent", 2)


async def test_postmark_a_call_whose_answer_never_came_is_sent_again(
    db: Database, fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy
) -> None:
    # A run that died in the provider call left the marker `sending`: the outcome is
    # unknown, so the next run sends (at least once; this is what can repeat).
    await db.execute(
        "INSERT INTO email_sends (key, provider) VALUES (%(k)s, 'postmark')",
        {"k": MESSAGE.idempotency_key},
    )
    sender = PostmarkSender(http, token=POSTMARK_TOKEN, base_url=fake.url, retry=policy)
    assert (await service(db, sender).send(MESSAGE)).status == "sent"
    assert len(fake.delivered) == 1
    row = await marker(db)
    assert row is not None and row["state"] == "sent"


async def test_a_refused_send_leaves_the_key_open_for_the_retry(
    db: Database, fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy
) -> None:
    fake.fail("postmark", 503, times=policy.attempts)
    sender = PostmarkSender(http, token=POSTMARK_TOKEN, base_url=fake.url, retry=policy)
    mail = service(db, sender)
    with pytest.raises(Exception, match="gave up"):
        await mail.send(MESSAGE)
    assert (await mail.send(MESSAGE)).status == "sent"
    assert len(fake.delivered) == 1


async def test_sendgrid_carries_the_key_in_custom_args_and_uses_the_marker(
    db: Database, fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy
) -> None:
    sender = SendGridSender(http, api_key=SENDGRID_KEY, base_url=fake.url, retry=policy)
    mail = service(db, sender)
    await mail.send(MESSAGE)
    await mail.send(MESSAGE)
    [request] = fake.sent("sendgrid")
    assert request.json["custom_args"] == {"idempotency_key": "notification/7/email"}
    assert len(fake.delivered) == 1


async def test_smtp_sends_a_key_once(tmp_path: Path, db: Database, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path) as smtp:
        sender = SmtpSender(
            parse_url(f"smtp://127.0.0.1:{smtp.port}"), starttls=False, retry=policy
        )
        mail = service(db, sender)
        first = await mail.send(MESSAGE)
        again = await mail.send(MESSAGE)
    assert len(smtp.received) == 1
    assert first.message_id == again.message_id == "<notification/7/email@tenantd>"


async def test_the_file_provider_writes_a_keyed_message_once(tmp_path: Path, db: Database) -> None:
    mail = service(db, FileSender(tmp_path))
    first = await mail.send(MESSAGE)
    again = await mail.send(replace(MESSAGE, text="rendered again"))
    other = await mail.send(replace(MESSAGE, idempotency_key="notification/8/email"))
    plain = await mail.send(replace(MESSAGE, idempotency_key=None))
    assert first.message_id == again.message_id != other.message_id
    assert plain.message_id not in (first.message_id, other.message_id)
    assert len(await asyncio.to_thread(lambda: list(tmp_path.glob("*.eml")))) == 3
    # The file provider keeps its own marks: no sent-marker rows.
    assert await marker(db) is None


def test_a_mail_job_keys_its_mail_by_its_id() -> None:
    unkeyed = replace(MESSAGE, idempotency_key=None)
    assert keyed(unkeyed).idempotency_key is None  # outside a job: unkeyed
    with job_mail_key(42, "auth.email"):
        first = keyed(unkeyed)
        second = keyed(unkeyed)
        own = keyed(MESSAGE)
    assert first.idempotency_key == "auth.email/42/1"
    assert second.idempotency_key == "auth.email/42/2"
    assert own.idempotency_key == "notification/7/email"  # a message's own key stays
    with job_mail_key(None, "auth.email"):  # an inline job (queues off) has no id
        assert keyed(unkeyed).idempotency_key is None


async def test_the_sent_mark_waits_for_a_database_that_went_away(
    db: Database,
    migrated: str,
    fake: FakeProviders,
    http: aiohttp.ClientSession,
    policy: RetryPolicy,
) -> None:
    # The provider accepts; before its answer arrives every connection to the database is
    # cut (a restart): the mark is written on a new connection, so no later run sends again.
    sender = PostmarkSender(http, token=POSTMARK_TOKEN, base_url=fake.url, retry=policy)
    mail = service(db, sender)
    gate = fake.hold_answer("postmark")
    sending = asyncio.create_task(mail.send(MESSAGE))
    await eventually(lambda: fake.delivered)
    await asyncio.to_thread(cut_connections, migrated)
    gate.set()
    assert (await sending).status == "sent"
    row = await marker(db)
    assert row is not None and row["state"] == "sent"
    assert (await mail.send(MESSAGE)).status == "sent"
    assert len(fake.delivered) == 1


def cut_connections(url: str) -> None:
    conn = psycopg2.connect(url_to_dsn(url))
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    finally:
        conn.close()


async def test_old_sent_markers_are_swept(db: Database, settings: Settings, migrated: str) -> None:
    await db.execute(
        "INSERT INTO email_sends (key, provider, created_at) VALUES"
        " ('old', 'postmark', now() - interval '8 days'), ('new', 'postmark', now())"
    )
    async with open_services(settings, migrated) as services:
        outcome = await run_sweep(services, registered_sweeps()["email_sends"])
    assert (outcome.status, outcome.counts) == ("ok", {"email_sends": 1})
    assert await db.fetch_val("SELECT array_agg(key) FROM email_sends") == ["new"]
