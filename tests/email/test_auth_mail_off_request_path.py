"""Verification resends and password-reset requests answer without waiting for the email
provider, so a slow provider cannot reveal which addresses have an account."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.bundle import DOMAINS
from tests.email.fake_providers import POSTMARK_TOKEN, FakeProviders
from tests.email.support import Start
from tests.helpers import eventually

# The fake Postmark does not answer until the test releases it, so an answer that waited for
# the provider would never come: the bound only needs to be generous (the machine may be busy).
ANSWER_WITHIN = 30.0


async def postmark_client(start: Start, fake: FakeProviders, **env: str) -> Any:
    return await start(
        EMAIL_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN=POSTMARK_TOKEN,
        POSTMARK_API_URL=fake.url,
        EMAIL_FROM="tenantd <no-reply@example.com>",
        **env,
    )


@pytest.mark.parametrize("queues", ["false", "true"])
@pytest.mark.parametrize(
    ("path", "unverified"),
    [("/api/v1/auth/password-reset/request", False), ("/api/v1/auth/resend-verification", True)],
)
async def test_the_answer_does_not_wait_for_a_slow_provider(
    start: Start, fake: FakeProviders, factory: Any, path: str, unverified: bool, queues: str
) -> None:
    client = await postmark_client(start, fake, QUEUES_ENABLED=queues)
    user = await factory.user(verified=not unverified)
    release = fake.hold("postmark")
    try:
        response = await asyncio.wait_for(
            client.post(path, json={"email": user.email}), ANSWER_WITHIN
        )
        assert response.status == 200
    finally:
        release.set()
    # The mail still goes out, from the job, after the answer.
    await eventually(lambda: _sent_to(fake, user.email))


async def test_known_and_unknown_addresses_do_the_same_work_on_the_request_path(
    start: Start, fake: FakeProviders, factory: Any
) -> None:
    client = await postmark_client(start, fake, QUEUES_ENABLED="true")
    services = client.server.app[DOMAINS]
    user = await factory.user()
    for email in (user.email, "nobody@example.com"):
        response = await client.post("/api/v1/auth/password-reset/request", json={"email": email})
        assert response.status == 200
    # One job each, carrying only the purpose and the address (no token is minted yet).
    rows = await services.db.fetch_all(
        "SELECT payload FROM jobs WHERE kind = 'auth.email' ORDER BY id"
    )
    assert [row["payload"] for row in rows] == [
        {"purpose": "password_reset", "email": user.email},
        {"purpose": "password_reset", "email": "nobody@example.com"},
    ]
    await eventually(lambda: _sent_to(fake, user.email))
    await eventually(lambda: _jobs_done(services))  # the unknown address's job too
    assert [r.json["To"] for r in fake.sent("postmark")] == [user.email]


async def _sent_to(fake: FakeProviders, address: str) -> bool:
    return any(r.json.get("To") == address for r in fake.sent("postmark"))


async def _jobs_done(services: Any) -> bool:
    statuses = await services.db.fetch_all("SELECT status FROM jobs WHERE kind = 'auth.email'")
    return bool(statuses) and all(r["status"] in ("done", "failed") for r in statuses)


async def _auth_job(services: Any) -> Any:
    return await services.db.fetch_one(
        "SELECT status, attempts, last_error FROM jobs WHERE kind = 'auth.email'"
    )


@pytest.mark.parametrize("queues", ["false", "true"])
async def test_a_provider_failure_fails_the_auth_job_and_its_retry_delivers(
    start: Start, fake: FakeProviders, factory: Any, queues: str
) -> None:
    client = await postmark_client(
        start,
        fake,
        QUEUES_ENABLED=queues,
        TENANTD_JOB_RETRY_BASE_SECONDS="0",
        TENANTD_JOB_POLL_SECONDS="0.05",
    )
    services = client.server.app[DOMAINS]
    user = await factory.user()
    fake.fail("postmark", 503, times=3)  # every try of the job's first attempt
    response = await client.post("/api/v1/auth/password-reset/request", json={"email": user.email})
    assert response.status == 200
    # Three refused tries, then the job's second attempt delivers the reset link.
    await eventually(lambda: len(fake.sent("postmark")) == 4)
    assert all(r.json["To"] == user.email for r in fake.sent("postmark"))
    assert "/reset-password?token=" in fake.sent("postmark")[-1].json["TextBody"]
    if queues == "true":
        await eventually(lambda: _jobs_done(services))
        job = await _auth_job(services)
        assert (job["status"], job["attempts"]) == ("done", 2)  # the durable queue ran it twice


async def test_a_permanent_refusal_settles_the_auth_job_without_a_retry(
    start: Start, fake: FakeProviders, factory: Any
) -> None:
    client = await postmark_client(
        start, fake, QUEUES_ENABLED="true", TENANTD_JOB_RETRY_BASE_SECONDS="0"
    )
    services = client.server.app[DOMAINS]
    user = await factory.user()
    fake.fail("postmark", 422, body={"ErrorCode": 300, "Message": "Invalid email request"})
    response = await client.post("/api/v1/auth/password-reset/request", json={"email": user.email})
    assert response.status == 200
    await eventually(lambda: _jobs_done(services))
    job = await _auth_job(services)
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert len(fake.sent("postmark")) == 1


async def test_a_suppressed_recipient_settles_the_auth_job(
    start: Start, fake: FakeProviders, factory: Any
) -> None:
    client = await postmark_client(start, fake, QUEUES_ENABLED="true")
    services = client.server.app[DOMAINS]
    user = await factory.user()
    fake.postmark_inactive(user.email)
    response = await client.post("/api/v1/auth/password-reset/request", json={"email": user.email})
    assert response.status == 200
    await eventually(lambda: _jobs_done(services))
    job = await _auth_job(services)
    assert (job["status"], job["attempts"]) == ("done", 1)
    assert len(fake.sent("postmark")) == 1
    assert await services.db.fetch_val(
        "SELECT reason FROM email_suppressions WHERE email = %(e)s", {"e": user.email}
    )
