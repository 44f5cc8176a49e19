"""Cookie attributes, parsed from the Set-Cookie headers, with COOKIE_SECURE on, off and unset."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tenantd.identity.tokens import ACCESS_TTL_SECONDS
from tests.auth.helpers import last_token, register, set_cookies
from tests.helpers import access_claims


@pytest.fixture(params=["true", "false", None], ids=["secure", "insecure", "default"])
def env(env: dict[str, str], request: Any) -> dict[str, str]:
    if request.param is None:
        env.pop("COOKIE_SECURE", None)
    else:
        env["COOKIE_SECURE"] = request.param
    return env


def expect_secure(env: dict[str, str]) -> bool:
    return env.get("COOKIE_SECURE", "true") == "true"


def check_attributes(cookie: dict[str, str], secure: bool) -> None:
    assert "httponly" in cookie
    assert cookie["samesite"] == "Lax"
    assert cookie["path"] == "/"
    assert ("secure" in cookie) is secure
    assert "domain" not in cookie


async def test_session_cookie_attributes(
    client: Any, factory: Any, env: dict[str, str], mail_dir: Path
) -> None:
    secure = expect_secure(env)
    user = await factory.user()
    sent = time.time()
    response = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    answered = time.time()
    took = answered - sent  # the request may be slow on a busy machine: allow what it took
    assert response.status == 200
    cookies = set_cookies(response)
    for name in ("auth_token", "refresh_token"):
        check_attributes(cookies[name], secure)
    claims = access_claims(client, cookies["auth_token"]["value"])
    max_age = int(cookies["auth_token"]["max-age"])
    # Max-Age is the token's remaining lifetime at some moment during the request.
    assert sent - 2 <= claims.expires_at - max_age <= answered + 2
    assert ACCESS_TTL_SECONDS - took - 3 <= max_age <= ACCESS_TTL_SECONDS
    refresh_age = int(cookies["refresh_token"]["max-age"])
    assert 30 * 86400 - took - 5 <= refresh_age <= 30 * 86400

    await register(client, "cookie@example.com")
    verified = await client.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "cookie@example.com")}
    )
    for name in ("auth_token", "refresh_token"):
        check_attributes(set_cookies(verified)[name], secure)


async def test_cleared_cookies_keep_the_attributes(
    make_client: Any, factory: Any, env: dict[str, str]
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    response = await browser.post("/api/v1/auth/logout")
    assert response.status == 200
    for cookie in set_cookies(response).values():
        check_attributes(cookie, expect_secure(env))
        assert cookie["max-age"] == "0"


async def test_registration_binding_cookie_attributes(
    client: Any, make_client: Any, env: dict[str, str], mail_dir: Path
) -> None:
    secure = expect_secure(env)
    registered = await register(client, "bound@example.com")
    binding = set_cookies(registered)["registration_binding"]
    check_attributes(binding, secure)
    assert binding["max-age"] == str(48 * 3600)
    # Sent explicitly: a Secure cookie would not travel over the test's plain http.
    browser = await make_client(cookies={"registration_binding": binding["value"]})
    verified = await browser.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "bound@example.com")}
    )
    assert verified.status == 200
    cleared = set_cookies(verified)["registration_binding"]
    check_attributes(cleared, secure)
    assert cleared["max-age"] == "0"
