"""Refresh is rate-limited like login: per client IP and per session family."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.db import Database
from tests.helpers import error_of

REFRESH = "/api/v1/auth/refresh"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env.update(
        {
            "RATE_LIMIT_ENABLED": "true",
            "RATE_LIMIT_REFRESH_PER_SESSION": "3",
            "RATE_LIMIT_REFRESH_PER_IP": "6",
            "RATE_LIMIT_REFRESH_WINDOW_SECONDS": "600",
        }
    )
    return env


async def assert_rate_limited(response: Any) -> None:
    assert response.status == 429, await response.text()
    assert error_of(await response.json())["code"] == "RATE_LIMITED"
    assert 1 <= int(response.headers["Retry-After"]) <= 600


async def test_refresh_is_limited_per_session_family(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    for _ in range(3):
        assert (await browser.post(REFRESH)).status == 200
    await assert_rate_limited(await browser.post(REFRESH))
    # Refused before any rotation: the family still has its one live row, and another
    # family from the same address is not held back by this one's limit.
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM sessions WHERE rotated_at IS NULL AND revoked_at IS NULL"
        )
        == 1
    )
    other = await make_client(cookies=await factory.cookies(user))
    assert (await other.post(REFRESH)).status == 200


async def test_parallel_refreshes_of_one_family_cannot_pass_the_limit(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    tabs = [await make_client(cookies=cookies) for _ in range(5)]
    responses = await asyncio.gather(*(tab.post(REFRESH) for tab in tabs))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200, 200, 200, 429, 429], statuses


async def test_refresh_is_limited_per_ip(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    for _ in range(6):
        browser = await make_client(cookies=await factory.cookies(user))
        assert (await browser.post(REFRESH)).status == 200
    late = await make_client(cookies=await factory.cookies(user))
    await assert_rate_limited(await late.post(REFRESH))


async def test_made_up_refresh_tokens_count_against_the_ip(make_client: Any) -> None:
    for attempt in range(6):
        browser = await make_client(cookies={"refresh_token": f"made-up-{attempt}"})
        assert (await browser.post(REFRESH)).status == 401
    browser = await make_client(cookies={"refresh_token": "made-up-again"})
    await assert_rate_limited(await browser.post(REFRESH))
