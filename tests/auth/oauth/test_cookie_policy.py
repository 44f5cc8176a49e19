"""Every Set-Cookie tenantd emits carries the one policy of identity/cookies.py: HttpOnly,
SameSite=Lax, Path=/ (the OAuth state cookie: its callback path), Secure per COOKIE_SECURE,
no Domain, and a Max-Age (0 when cleared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.auth.helpers import last_token, register, set_cookies
from tests.auth.oauth.support import CALLBACK_PATH, PROVIDER, Browser
from tests.factories import Factory


@pytest.fixture(params=["true", "false"], ids=["secure", "insecure"])
def env(env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    env["COOKIE_SECURE"] = request.param
    return env


async def test_every_set_cookie_carries_the_policy(
    browser: Browser, make_client: Any, factory: Factory, env: dict[str, str], mail_dir: Path
) -> None:
    secure = env["COOKIE_SECURE"] == "true"
    seen: dict[str, set[str]] = {}

    def check(response: Any) -> dict[str, dict[str, str]]:
        cookies = set_cookies(response)
        for name, cookie in cookies.items():
            path = CALLBACK_PATH if name == "oauth_state" else "/"
            assert "httponly" in cookie, (name, cookie)
            assert cookie["samesite"] == "Lax", (name, cookie)
            assert cookie["path"] == path, (name, cookie)
            assert ("secure" in cookie) is secure, (name, cookie)
            assert "domain" not in cookie, (name, cookie)
            assert int(cookie["max-age"]) >= 0, (name, cookie)
            seen.setdefault(name, set()).add("cleared" if cookie["max-age"] == "0" else "set")
        return cookies

    # OAuth: the state cookie at start; at the callback it is cleared and the session set.
    start = await browser.client.get(f"/api/v1/auth/oauth/{PROVIDER}/start", allow_redirects=False)
    assert start.status == 302
    # Planted by hand: a Secure cookie would not travel over the test's plain http.
    browser.set_state_cookie(check(start)["oauth_state"]["value"])
    callback = await browser.callback(await browser.authorize(start.headers["Location"]))
    assert callback.status == 302 and callback.headers["Location"] == "/"
    assert set(check(callback)) == {"oauth_state", "auth_token", "refresh_token", "device_id"}

    # Sign-up: the binding cookie, cleared with the session set by its verification link.
    binding = check(await register(browser.client, "policy@example.com"))
    bound = await make_client(
        cookies={"registration_binding": binding["registration_binding"]["value"]}
    )
    verified = await bound.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "policy@example.com")}
    )
    assert verified.status == 200
    assert set(check(verified)) == {
        "registration_binding",
        "auth_token",
        "refresh_token",
        "device_id",
    }

    # Login, refresh, account switch (auth_token only), logout (both cleared).
    user = await factory.user()
    other = await factory.user()
    assert other.account_id is not None
    await factory.member(other.account_id, user.id, "admin")
    login = await make_client()
    signed_in = await login.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert signed_in.status == 200
    issued = check(signed_in)

    def browser_with(cookies: dict[str, dict[str, str]]) -> Any:
        # Each step gets the cookies by hand: a Secure cookie stays in the jar over plain http.
        return make_client(cookies={name: cookie["value"] for name, cookie in cookies.items()})

    refreshed = await (await browser_with(issued)).post("/api/v1/auth/refresh")
    assert refreshed.status == 200
    renewed = check(refreshed)
    assert set(renewed) == {"auth_token", "refresh_token"}
    switched = await (await browser_with(renewed)).post(
        "/api/v1/accounts/switch", json={"accountId": str(other.account_id)}
    )
    assert switched.status == 200, await switched.text()
    access = check(switched)
    assert set(access) == {"auth_token"}
    logged_out = await (await browser_with({**renewed, **access})).post("/api/v1/auth/logout")
    assert logged_out.status == 200
    assert set(check(logged_out)) == {"auth_token", "refresh_token"}

    assert seen == {
        **{
            name: {"set", "cleared"}
            for name in ("oauth_state", "auth_token", "refresh_token", "registration_binding")
        },
        "device_id": {"set"},  # the browser stays known after sign-out
    }
