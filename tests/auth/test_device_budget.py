"""Ten wrong passwords from anywhere no longer lock the owner out: a browser that signed in as
the user before carries a device cookie naming the user and has a login budget of its own
(OWASP "device cookies"); no cookie, a forged one or another user's counts against the
address's shared budget as before. The API login and the hosted /login page alike."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tenantd.identity.cookies import DEVICE_COOKIE
from tests.factories import Factory
from tests.helpers import error
from tests.mfa.helpers import cookie

LOGIN = "/api/v1/auth/login"
SHARED_BUDGET = 10  # RATE_LIMIT_LOGIN_PER_EMAIL's default


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The abuse limiter on, at the production login limits (every client here is 127.0.0.1:
    the per-IP limit is raised out of the way)."""
    env.update(
        RATE_LIMIT_ENABLED="true",
        RATE_LIMIT_LOGIN_PER_EMAIL=str(SHARED_BUDGET),
        RATE_LIMIT_LOGIN_PER_IP="1000",
    )
    return env


async def login(client: Any, email: str, password: str) -> Any:
    return await client.post(LOGIN, json={"email": email, "password": password})


async def signed_in_browser(make_client: Any, email: str, password: str) -> Any:
    browser = await make_client()
    response = await login(browser, email, password)
    assert response.status == 200, await response.text()
    value = cookie(browser, DEVICE_COOKIE)
    assert value and re.fullmatch(r"[A-Za-z0-9_-]{43}\.[0-9a-f]{32}", value), value
    await browser.post("/api/v1/auth/logout")
    return browser


async def test_failures_elsewhere_do_not_lock_out_a_browser_that_signed_in_before(
    make_client: Any, factory: Factory
) -> None:
    owner = await factory.user()
    other = await factory.user()
    owners_browser = await signed_in_browser(make_client, owner.email, owner.password)
    others_browser = await signed_in_browser(make_client, other.email, other.password)
    owners_cookie = cookie(owners_browser, DEVICE_COOKIE)
    assert owners_cookie is not None
    attacker = await make_client()
    # The attacker tries with no cookie, a forged tag, and another user's valid cookie:
    # every one of them spends the address's shared budget.
    forged = owners_cookie.rsplit(".", 1)[0] + "." + "0" * 32
    for attempt in range(SHARED_BUDGET - 1):  # the owner's first sign-in spent one
        jar: dict[str, str] = {}
        if attempt % 3 == 1:
            jar = {DEVICE_COOKIE: forged}
        elif attempt % 3 == 2:
            jar = {DEVICE_COOKIE: str(cookie(others_browser, DEVICE_COOKIE))}
        attacker.session.cookie_jar.clear()
        attacker.session.cookie_jar.update_cookies(jar)
        await error(await login(attacker, owner.email, "wrong password"), 401)
    await error(await login(attacker, owner.email, owner.password), 429, "RATE_LIMITED")
    stranger = await make_client()
    await error(await login(stranger, owner.email, owner.password), 429, "RATE_LIMITED")
    # The owner's browser signs in all the same.
    response = await login(owners_browser, owner.email, owner.password)
    assert response.status == 200, await response.text()


async def test_a_known_browser_has_a_budget_of_its_own_not_an_unlimited_one(
    make_client: Any, factory: Factory
) -> None:
    owner = await factory.user()
    browser = await signed_in_browser(make_client, owner.email, owner.password)
    for _ in range(SHARED_BUDGET):  # its sign-in above spent the shared budget, not its own
        await error(await login(browser, owner.email, "wrong password"), 401)
    await error(await login(browser, owner.email, owner.password), 429, "RATE_LIMITED")
    # Its failures were its own: a fresh browser still has the shared budget.
    fresh = await make_client()
    response = await login(fresh, owner.email, owner.password)
    assert response.status == 200, await response.text()


async def test_the_hosted_login_page_keeps_the_same_budgets(
    make_client: Any, factory: Factory
) -> None:
    owner = await factory.user()
    browser = await signed_in_browser(make_client, owner.email, owner.password)
    attacker = await make_client()
    for _ in range(SHARED_BUDGET - 1):  # the owner's first sign-in spent one
        await error(await login(attacker, owner.email, "wrong password"), 401)
    page = await (await browser.get("/login")).text()
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token, page[:2000]
    response = await browser.post(
        "/login",
        data={"csrf": token.group(1), "email": owner.email, "password": owner.password},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()
    attacker_page = await (await attacker.get("/login")).text()
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', attacker_page)
    assert token
    response = await attacker.post(
        "/login",
        data={"csrf": token.group(1), "email": owner.email, "password": owner.password},
        allow_redirects=False,
    )
    assert response.status == 429


async def test_step_up_and_password_change_keep_the_browsers_own_budget(
    make_client: Any, factory: Factory
) -> None:
    """The password step-up (POST /api/v1/auth/reauth, and the hosted step-up box) and the
    password change count like login: failures elsewhere spend the address's shared budget,
    not the budget of a browser that signed in as the user, so they cannot lock the owner's
    browser out of confirming a change; that browser's own failures still end its budget."""
    owner = await factory.user()
    browser = await make_client()
    assert (await login(browser, owner.email, owner.password)).status == 200
    assert cookie(browser, DEVICE_COOKIE)
    attacker = await make_client()
    for _ in range(SHARED_BUDGET - 1):  # the owner's sign-in spent one
        await error(await login(attacker, owner.email, "wrong password"), 401)
    await error(await login(attacker, owner.email, owner.password), 429, "RATE_LIMITED")
    # A session without the owner's device cookie is held to the spent shared budget.
    elsewhere = await make_client()
    assert (await login(browser, owner.email, owner.password)).status == 200  # own budget
    elsewhere.session.cookie_jar.update_cookies(
        {"auth_token": str(cookie(browser, "auth_token"))}, response_url=elsewhere.make_url("/")
    )
    await error(
        await elsewhere.post("/api/v1/auth/reauth", json={"password": owner.password}),
        429,
        "RATE_LIMITED",
    )

    response = await browser.post("/api/v1/auth/reauth", json={"password": owner.password})
    assert response.status == 200, await response.text()
    new_password = "a brand new passphrase 42"
    response = await browser.post(
        "/api/v1/auth/password",
        json={"currentPassword": owner.password, "newPassword": new_password},
    )
    assert response.status == 200, await response.text()
    # Not an unlimited budget: the browser's own wrong passwords end it.
    for _ in range(SHARED_BUDGET):
        answer = await browser.post("/api/v1/auth/reauth", json={"password": "wrong password"})
        if answer.status == 429:
            break
        assert answer.status == 401, await answer.text()
    else:
        raise AssertionError("the browser's own budget never ran out")
