"""The password route is rate-limited like login: a stolen session is no password oracle."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import error_of

NEW_PASSWORD = "a brand new passphrase"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env.update(
        {
            "RATE_LIMIT_ENABLED": "true",
            "RATE_LIMIT_LOGIN_PER_IP": "100",
            "RATE_LIMIT_LOGIN_PER_EMAIL": "3",
            "RATE_LIMIT_LOGIN_WINDOW_SECONDS": "600",
        }
    )
    return env


async def test_wrong_current_passwords_share_the_login_limit_of_the_address(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    for _ in range(3):
        wrong = await browser.post(
            "/api/v1/auth/password",
            json={"currentPassword": "a guess at it", "newPassword": NEW_PASSWORD},
        )
        assert wrong.status == 401
        assert error_of(await wrong.json())["code"] == "INVALID_CREDENTIALS"
    # Over the limit: even the right password waits, and so does login for the address.
    limited = await browser.post(
        "/api/v1/auth/password",
        json={"currentPassword": user.password, "newPassword": NEW_PASSWORD},
    )
    assert limited.status == 429
    assert error_of(await limited.json())["code"] == "RATE_LIMITED"
    assert int(limited.headers["Retry-After"]) > 0
    login = await (await make_client()).post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 429
    # Another user's budget is their own.
    other = await factory.user()
    elsewhere = await make_client(cookies=await factory.cookies(other))
    changed = await elsewhere.post(
        "/api/v1/auth/password",
        json={"currentPassword": other.password, "newPassword": NEW_PASSWORD},
    )
    assert changed.status == 200
