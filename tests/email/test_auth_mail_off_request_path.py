"""Verification resends and password-reset requests answer without waiting for the email
provider, so a slow provider cannot reveal which addresses have an account."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.services import SERVICES
from tests.email.conftest import Start
from tests.email.fake_providers import POSTMARK_TOKEN, FakeProviders
from tests.notifications.conftest import eventually

PROVIDER_DELAY = 3.0  # the fake Postmark answers this late
ANSWER_WITHIN = 1.5  # far more than a request needs, far less than the provider delay


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
    fake.slow("postmark", PROVIDER_DELAY)

    response = await asyncio.wait_for(client.post(path, json={"email": user.email}), ANSWER_WITHIN)

    assert response.status == 200
    # The mail still goes out, from the job, after the answer.
    await eventually(lambda: _sent_to(fake, user.email), within=PROVIDER_DELAY + 5)


async def test_known_and_unknown_addresses_do_the_same_work_on_the_request_path(
    start: Start, fake: FakeProviders, factory: Any
) -> None:
    client = await postmark_client(start, fake, QUEUES_ENABLED="true")
    services = client.server.app[SERVICES]
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
    await asyncio.sleep(0.2)
    assert [r.json["To"] for r in fake.sent("postmark")] == [user.email]


async def _sent_to(fake: FakeProviders, address: str) -> bool:
    return any(r.json.get("To") == address for r in fake.sent("postmark"))
