"""The limits of mail to an address the caller chooses, counted in the action: per acting
user and per recipient, under concurrency, whatever route calls it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.factories import Factory, read_mails
from tests.mail_limits.test_route_walk import fresh
from tests.mfa.helpers import signed_in


def mails_to(mail_dir: Path, address: str) -> int:
    return sum(1 for m in read_mails(mail_dir) if m["To"] == address)


async def test_thirty_parallel_requests_mail_a_third_party_twice(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path, services: Any
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, db, settings, user)
    victim = fresh("victim")
    answers = await asyncio.gather(
        *(client.post("/api/v1/users/me/email", json={"newEmail": victim}) for _ in range(30))
    )
    statuses = sorted(answer.status for answer in answers)
    assert statuses == [202] * 2 + [429] * 28
    refused = next(answer for answer in answers if answer.status == 429)
    assert (await refused.json())["error"]["code"] == "RATE_LIMITED"
    assert 0 < int(refused.headers["Retry-After"]) <= 3600
    await services.jobs.drain(10)
    assert mails_to(mail_dir, victim) == 2


async def test_the_limit_is_per_user_across_recipients_and_per_recipient_across_users(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path, services: Any
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, db, settings, user)
    statuses = []
    for _ in range(4):  # per user: 3, each to a new address
        answer = await client.post("/api/v1/users/me/email", json={"newEmail": fresh("a")})
        statuses.append(answer.status)
    assert statuses == [202, 202, 202, 429]

    shared = fresh("shared")  # per recipient: 2, whoever asks
    first, second, third = [
        await signed_in(make_client, db, settings, await factory.user(password=None))
        for _ in range(3)
    ]
    assert (await first.post("/api/v1/users/me/email", json={"newEmail": shared})).status == 202
    assert (await second.post("/api/v1/users/me/email", json={"newEmail": shared})).status == 202
    assert (await third.post("/api/v1/users/me/email", json={"newEmail": shared})).status == 429
    await services.jobs.drain(10)
    assert mails_to(mail_dir, shared) == 2


async def test_invitations_count_create_and_resend_together_per_invitee(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path, services: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    client = await signed_in(make_client, db, settings, owner)
    invitee = fresh("invitee")
    created = await client.post(
        f"/api/v1/accounts/{owner.account_id}/invitations",
        json={"email": invitee, "role": "member"},
    )
    assert created.status == 201
    invitation = (await created.json())["data"]["invitation"]["id"]
    resend = f"/api/v1/accounts/{owner.account_id}/invitations/{invitation}/resend"
    assert (await client.post(resend)).status == 200
    refused = await client.post(resend)
    assert refused.status == 429
    assert refused.headers["Retry-After"]
    await services.jobs.drain(10)
    assert mails_to(mail_dir, invitee) == 2
