"""kill -9 of a real `tenantd serve` with mail jobs in flight (issue 26): the jobs run again
after the restart and no message reaches the provider's outbox twice, where the provider's
own rules allow it. The fakes behave as the real providers do: Resend sends once per
`Idempotency-Key`; Postmark and SendGrid have no key and mail the same request twice, so the
sent-marker written before their call is what stops a second send."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from tenantd.app.settings import load_settings
from tenantd.auth.service import VERIFY
from tenantd.db import Database
from tenantd.identity.signin import AUTH_EMAIL
from tests.email.fake_providers import (
    POSTMARK_TOKEN,
    RESEND_KEY,
    SENDGRID_KEY,
    FakeProviders,
    Scripted,
)
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.ops.servers import REPO, running, server_env, start_server

JOBS = 6

PROVIDER_ENV = {
    "postmark": lambda url: {"POSTMARK_SERVER_TOKEN": POSTMARK_TOKEN, "POSTMARK_API_URL": url},
    "resend": lambda url: {"RESEND_API_KEY": RESEND_KEY, "RESEND_API_URL": url},
    "sendgrid": lambda url: {"SENDGRID_API_KEY": SENDGRID_KEY, "SENDGRID_API_URL": url},
}


def serve_env(migrated: str, tmp_path: Path, fake: FakeProviders, provider: str) -> dict[str, str]:
    return server_env(
        migrated,
        tmp_path,
        SECRET,
        LOG_LEVEL="warning",
        PYTHONPATH=str(REPO),
        QUEUES_ENABLED="true",
        TENANTD_SCHEDULER_ENABLED="false",
        TENANTD_JOB_POLL_SECONDS="0.05",
        JOB_LEASE_SECONDS="2",
        EMAIL_PROVIDER=provider,
        **PROVIDER_ENV[provider](fake.url),
    )


async def queue_mail_jobs(db: Database, factory: Factory) -> None:
    """JOBS verification mails (one per unverified user), as a sign-up queues them."""
    emails = [(await factory.user(verified=False)).email for _ in range(JOBS)]
    async with db.transaction() as conn:
        for email in emails:
            await conn.execute(
                "INSERT INTO jobs (kind, payload, max_attempts) VALUES (%(k)s, %(p)s::jsonb, 3)",
                {"k": AUTH_EMAIL, "p": f'{{"purpose": "{VERIFY}", "email": "{email}"}}'},
            )


def hold_all(fake: FakeProviders, provider: str) -> asyncio.Event:
    """The next JOBS requests wait for one gate (the provider is slow to answer)."""
    gate = asyncio.Event()
    for _ in range(JOBS):
        fake.scripts[provider].append(Scripted(status=200, gate=gate))
    return gate


async def completion_blocked(db: Database) -> bool:
    """The server's job completion waits for the test's lock on the job rows."""
    waiting = await db.fetch_val(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query LIKE '%%status = ''done''%%'"
    )
    return bool(waiting)


async def _no_lock_waiters(db: Database) -> bool:
    waiting = await db.fetch_val(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    )
    return not waiting


async def all_jobs_done(db: Database) -> bool:
    rows = await db.fetch_all("SELECT status FROM jobs WHERE kind = %(k)s", {"k": AUTH_EMAIL})
    return len(rows) == JOBS and all(r["status"] == "done" for r in rows)


@pytest.mark.parametrize("provider", ["postmark", "sendgrid", "resend"])
async def test_kill_9_after_the_provider_answered_mails_nothing_twice(
    db: Database,
    migrated: str,
    tmp_path: Path,
    fake: FakeProviders,
    provider: str,
) -> None:
    env = serve_env(migrated, tmp_path, fake, provider)
    factory = Factory(db, load_settings(environ=env))
    gate = hold_all(fake, provider)
    first = start_server("first", env, tmp_path)
    async with running([first]):
        await queue_mail_jobs(db, factory)
        await eventually(lambda: len(fake.sent(provider)) >= JOBS, within=60)
        # Every job is in its provider call. Hold the job rows so no completion can be
        # written, let the provider answer, and kill the process once it is done sending.
        async with db.transaction() as conn:
            await conn.execute(
                "SELECT id FROM jobs WHERE kind = %(k)s FOR UPDATE", {"k": AUTH_EMAIL}
            )
            gate.set()
            await eventually(lambda: len(fake.delivered) >= JOBS, within=30)
            await eventually(lambda: completion_blocked(db), within=30)
            await eventually(lambda: _answers_recorded(db, provider), within=30)
            first.terminate(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
            # Its blocked statements die with it (a backend would otherwise finish the
            # completion once the lock is released, as if the process had lived).
            await db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            await eventually(lambda: _no_lock_waiters(db), within=30)
    assert len(fake.delivered) == JOBS
    second = start_server("second", env, tmp_path)
    async with running([second]):
        await eventually(lambda: all_jobs_done(db), within=60)
    # Every job ran again (and minted a new link): the provider mailed nothing twice.
    recipients = [_recipient(provider, r.json) for r in fake.delivered]
    assert len(recipients) == JOBS and len(set(recipients)) == JOBS, recipients


async def _answers_recorded(db: Database, provider: str) -> bool:
    """The sent-markers of the providers without a key are written (Resend keeps none)."""
    if provider == "resend":
        return True
    if not await db.fetch_val("SELECT to_regclass('email_sends') IS NOT NULL"):
        return True  # before issue 26 there was no marker to wait for
    sent = await db.fetch_val("SELECT count(*) FROM email_sends WHERE state = 'sent'")
    return bool(sent == JOBS)


def _recipient(provider: str, body: Any) -> str:
    if provider == "postmark":
        return str(body["To"])
    if provider == "sendgrid":
        return str(body["personalizations"][0]["to"][0]["email"])
    return str(body["to"][0])


async def test_kill_9_while_resend_is_sending_mails_nothing_twice(
    db: Database, migrated: str, tmp_path: Path, fake: FakeProviders
) -> None:
    """The calls in flight at the crash: Resend accepted them, the process died before their
    answers; the runs after the restart repeat their keys, so Resend does not send again."""
    env = serve_env(migrated, tmp_path, fake, "resend")
    factory = Factory(db, load_settings(environ=env))
    gate = fake.hold_answer("resend", times=JOBS)
    first = start_server("first", env, tmp_path)
    try:
        async with running([first]):
            await queue_mail_jobs(db, factory)
            await eventually(lambda: len(fake.delivered) >= JOBS, within=60)
            first.terminate(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
    finally:
        gate.set()
    second = start_server("second", env, tmp_path)
    async with running([second]):
        await eventually(lambda: all_jobs_done(db), within=60)
    assert len(fake.sent("resend")) >= 2 * JOBS  # every job did call Resend again
    recipients = [r.json["to"][0] for r in fake.delivered]
    assert len(recipients) == JOBS and len(set(recipients)) == JOBS, recipients
