"""Invitation and join-request mail leave from an `accounts.email` job submitted in the
transaction of the change: a rolled-back change mails nothing, a provider failure is retried,
and no token sits in the job's payload."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tenantd.accounts import invitations
from tenantd.accounts import mail as account_mail
from tenantd.accounts.provisioning import provision_personal_account
from tenantd.bundle import DOMAINS
from tests.accounts.helpers import principal
from tests.email.fake_providers import POSTMARK_TOKEN, FakeProviders
from tests.email.support import Start
from tests.factories import Factory
from tests.helpers import eventually

QUEUES = pytest.mark.parametrize("queues", ["false", "true"])


async def postmark_app(start: Start, fake: FakeProviders, queues: str, **env: str) -> Any:
    client = await start(
        EMAIL_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN=POSTMARK_TOKEN,
        POSTMARK_API_URL=fake.url,
        EMAIL_FROM="tenantd <no-reply@example.com>",
        QUEUES_ENABLED=queues,
        TENANTD_JOB_RETRY_BASE_SECONDS="0",
        TENANTD_JOB_POLL_SECONDS="0.05",
        **env,
    )
    return client.server.app[DOMAINS]


def to(fake: FakeProviders, address: str) -> list[Any]:
    return [r.json for r in fake.sent("postmark") if r.json.get("To") == address]


async def invite(services: Any, owner: Any, email: str) -> invitations.Issued:
    actor = principal(owner, owner.account_id, "owner")
    return await invitations.create_invitation(
        services, actor, owner.account_id, email=email, role="member"
    )


@QUEUES
async def test_a_rolled_back_invitation_mails_nothing(
    start: Start, fake: FakeProviders, factory: Factory, monkeypatch: Any, queues: str
) -> None:
    services = await postmark_app(start, fake, queues)
    owner = await factory.user(plan="team", password=None)
    queued = account_mail.submit_invitation

    async def queue_then_fail(*args: Any, **kwargs: Any) -> None:
        await queued(*args, **kwargs)
        raise RuntimeError("the change fails after its mail was queued")

    monkeypatch.setattr(account_mail, "submit_invitation", queue_then_fail)
    with pytest.raises(RuntimeError):
        await invite(services, owner, "rolled.back@example.com")
    monkeypatch.undo()
    # A committed invitation after it is mailed: the mail path was alive all along.
    await invite(services, owner, "committed@example.com")
    await eventually(lambda: bool(to(fake, "committed@example.com")))
    await services.jobs.drain(5)
    await asyncio.sleep(0.3)
    assert [r.json["To"] for r in fake.sent("postmark")] == ["committed@example.com"]
    assert await services.db.fetch_val("SELECT count(*) FROM invitations") == 1


@QUEUES
async def test_a_provider_failure_is_retried_and_the_invitation_arrives(
    start: Start, fake: FakeProviders, factory: Factory, queues: str
) -> None:
    services = await postmark_app(start, fake, queues)
    owner = await factory.user(plan="team", password=None)
    fake.fail("postmark", 503, times=3)  # every try of the job's first attempt

    issued = await invite(services, owner, "retried@example.com")

    await eventually(lambda: len(to(fake, "retried@example.com")) == 4)
    await services.jobs.drain(5)
    # The mail of the second attempt carries the token the API answered with.
    assert issued.token in to(fake, "retried@example.com")[-1]["TextBody"]
    if queues == "true":
        sql = "SELECT status, attempts, payload FROM jobs WHERE kind = 'accounts.email'"
        deadline = time.monotonic() + 5
        while (job := await services.db.fetch_one(sql))["status"] != "done":
            assert time.monotonic() < deadline, job
            await asyncio.sleep(0.05)
        assert job["attempts"] == 2
        assert issued.token not in str(job["payload"])


async def test_the_job_payload_holds_no_token(
    start: Start, fake: FakeProviders, factory: Factory
) -> None:
    services = await postmark_app(start, fake, "true")
    owner = await factory.user(plan="team", password=None)
    issued = await invite(services, owner, "payload@example.com")
    actor = principal(owner, owner.account_id, "owner")
    resent = await invitations.resend_invitation(
        services, actor, owner.account_id, invitation_id=issued.invitation["id"]
    )
    rows = await services.db.fetch_all(
        "SELECT payload FROM jobs WHERE kind = 'accounts.email' ORDER BY id"
    )
    assert len(rows) == 2
    for row in rows:
        assert set(row["payload"]) == {"purpose", "invitationId", "seed", "inviterId"}
        for token in (issued.token, resent.token):
            assert token not in str(row["payload"])
    await eventually(lambda: len(to(fake, "payload@example.com")) == 2)
    texts = [m["TextBody"] for m in to(fake, "payload@example.com")]
    assert sorted(t for t in (issued.token, resent.token) if any(t in x for x in texts)) == sorted(
        (issued.token, resent.token)
    )


@QUEUES
async def test_join_request_notices_survive_a_provider_failure(
    start: Start, fake: FakeProviders, factory: Factory, queues: str
) -> None:
    services = await postmark_app(start, fake, queues, ACCOUNT_DOMAIN_CLAIMING="true")
    owner = await factory.user(email="boss@claimed.io", password=None)
    await services.db.execute(
        "UPDATE accounts SET claimed_domain = 'claimed.io' WHERE id = %(a)s",
        {"a": owner.account_id},
    )
    newcomer = await factory.user(email="new@claimed.io", password=None, account=False)
    fake.fail("postmark", 503, times=3)

    async with services.db.transaction() as conn:
        outcome = await provision_personal_account(conn, services.settings, user_id=newcomer.id)
        assert outcome.conflict is not None
        await account_mail.submit_join_request(
            services, conn, join_request_id=outcome.conflict.join_request_id
        )

    await eventually(lambda: len(fake.sent("postmark")) == 5)
    await services.jobs.drain(5)
    (notice,) = {m["Subject"]: m for m in to(fake, "boss@claimed.io")}.values()
    assert "new@claimed.io" in notice["Subject"]
    (told,) = {m["Subject"]: m for m in to(fake, "new@claimed.io")}.values()
    assert "claimed.io" in told["Subject"]
