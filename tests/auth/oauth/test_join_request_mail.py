"""An OAuth sign-in on a claimed domain mails the owner and the requester the way a verified
sign-up does: `accounts.email` jobs committed with the join request, so a provider failure is
retried by the job queue instead of being swallowed on the callback."""

from __future__ import annotations

from typing import Any

import pytest

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.jobs.settings import JobSettings
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import Browser, login_error
from tests.email.fake_providers import POSTMARK_TOKEN, FakeProviders
from tests.factories import Factory
from tests.helpers import eventually


@pytest.fixture(params=["false", "true"], ids=["inline", "durable"])
def env(env: dict[str, str], fake: FakeProviders, request: pytest.FixtureRequest) -> dict[str, str]:
    env.update(
        {
            "ACCOUNT_DOMAIN_CLAIMING": "true",
            "EMAIL_PROVIDER": "postmark",
            "POSTMARK_SERVER_TOKEN": POSTMARK_TOKEN,
            "POSTMARK_API_URL": fake.url,
            "EMAIL_FROM": "tenantd <no-reply@example.com>",
            "QUEUES_ENABLED": request.param,
            "TENANTD_JOB_RETRY_BASE_SECONDS": "0",
            "TENANTD_JOB_POLL_SECONDS": "0.05",
        }
    )
    return env


def to(fake: FakeProviders, address: str) -> list[Any]:
    return [r.json for r in fake.sent("postmark") if r.json.get("To") == address]


async def settled_jobs(db: Database) -> list[Any] | None:
    jobs = await db.fetch_all(
        "SELECT status, attempts, payload->>'purpose' AS purpose FROM jobs"
        " WHERE kind = 'accounts.email' ORDER BY id"
    )
    return jobs if jobs and all(j["status"] in ("done", "failed") for j in jobs) else None


async def test_join_request_mails_leave_from_jobs_that_retry_a_provider_failure(
    browser: Browser, idp: FakeIdP, factory: Factory, db: Database, fake: FakeProviders
) -> None:
    owner = await factory.user(email="owner@acme.test", password=None)
    await db.execute(
        "UPDATE accounts SET claimed_domain = 'acme.test' WHERE id = %(a)s",
        {"a": owner.account_id},
    )
    # More refusals than two sends can absorb (a send tries 3 times): a job must fail and run
    # again for both mails to arrive.
    fake.fail("postmark", 503, times=6)
    idp.user = FakeUser(sub="bob-subject", email="bob@acme.test", given_name="Bob")

    assert login_error(await browser.sign_in())["error"] == "domain_claimed"

    await eventually(lambda: len(fake.sent("postmark")) == 8)  # 6 refusals + 2 deliveries
    services = browser.client.server.app[DOMAINS]
    await services.jobs.drain(5)
    (notice,) = {m["Subject"]: m for m in to(fake, "owner@acme.test")}.values()
    assert "bob@acme.test" in notice["TextBody"]
    (told,) = {m["Subject"]: m for m in to(fake, "bob@acme.test")}.values()
    assert "acme.test" in told["Subject"]
    if services.settings.section(JobSettings).queues_enabled:
        jobs = await eventually(lambda: settled_jobs(db))
        assert [(j["purpose"], j["status"]) for j in jobs] == [
            ("join_request", "done"),
            ("join_request_sent", "done"),
        ]
        assert sum(j["attempts"] for j in jobs) >= 3  # at least one job ran twice


async def test_a_returning_user_is_not_mailed_again(
    browser: Browser,
    new_browser: Any,
    idp: FakeIdP,
    factory: Factory,
    db: Database,
    fake: FakeProviders,
) -> None:
    owner = await factory.user(email="owner@acme.test", password=None)
    await db.execute(
        "UPDATE accounts SET claimed_domain = 'acme.test' WHERE id = %(a)s",
        {"a": owner.account_id},
    )
    idp.user = FakeUser(sub="bob-subject", email="bob@acme.test", given_name="Bob")
    assert login_error(await browser.sign_in())["error"] == "domain_claimed"
    await eventually(lambda: len(fake.sent("postmark")) == 2)
    again: Browser = await new_browser()
    assert login_error(await again.sign_in())["error"] == "domain_claimed"
    await again.client.server.app[DOMAINS].jobs.drain(5)
    durable = await db.fetch_val("SELECT count(*) FROM jobs WHERE kind = 'accounts.email'")
    assert durable == (
        2 if again.client.server.app[DOMAINS].settings.section(JobSettings).queues_enabled else 0
    )
    assert len(fake.sent("postmark")) == 2
