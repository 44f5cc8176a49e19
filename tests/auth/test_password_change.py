"""POST /api/v1/auth/password: set a password, or change it given the current one; every
other session of the user ends (user-wide cutoff) while the caller stays signed in."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tenantd.db import Database
from tests.auth.helpers import last_token, register, set_cookies
from tests.helpers import error_of

NEW_PASSWORD = "a brand new passphrase"


async def change(browser: Any, **body: str) -> Any:
    return await browser.post("/api/v1/auth/password", json=body)


async def refresh_with(make_client: Any, refresh_token: str) -> Any:
    browser = await make_client(cookies={"refresh_token": refresh_token})
    return await browser.post("/api/v1/auth/refresh")


async def login_status(make_client: Any, email: str, password: str) -> int:
    response = await (await make_client()).post(
        "/api/v1/auth/login", json={"email": email, "password": password}
    )
    await response.read()
    return response.status


async def test_a_user_without_a_password_sets_one(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user(password=None)
    browser = await make_client(cookies=await factory.cookies(user))
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["hasPasswordLogin"] is False
    response = await change(browser, newPassword=NEW_PASSWORD)
    body = await response.json()
    assert response.status == 200, body
    assert body["data"]["user"]["id"] == str(user.id)
    assert set(set_cookies(response)) == {"auth_token", "refresh_token"}
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["hasPasswordLogin"] is True
    assert [p["provider"] for p in me["authProviders"]] == ["password"]
    assert await login_status(make_client, user.email, NEW_PASSWORD) == 200


async def test_changing_needs_the_current_password(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    missing = await change(browser, newPassword=NEW_PASSWORD)
    assert missing.status == 422
    error = error_of(await missing.json())
    assert error["code"] == "VALIDATION_ERROR"
    assert set(error["details"]["fields"]) == {"currentPassword"}
    for wrong in ("not the password", user.password.upper(), user.password + " "):
        refused = await change(browser, currentPassword=wrong, newPassword=NEW_PASSWORD)
        assert refused.status == 401
        assert error_of(await refused.json())["code"] == "INVALID_CREDENTIALS"
        assert set_cookies(refused) == {}
    # Nothing changed: the old password works, the new one does not, this browser is in.
    assert await login_status(make_client, user.email, user.password) == 200
    assert await login_status(make_client, user.email, NEW_PASSWORD) == 401
    assert (await browser.get("/test/required")).status == 200

    changed = await change(browser, currentPassword=user.password, newPassword=NEW_PASSWORD)
    assert changed.status == 200, await changed.text()
    assert await login_status(make_client, user.email, NEW_PASSWORD) == 200
    assert await login_status(make_client, user.email, user.password) == 401


async def test_other_sessions_end_and_the_caller_stays_signed_in(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    others = [await factory.cookies(user) for _ in range(2)]
    stranger = await factory.user()
    strangers_cookies = await factory.cookies(stranger)
    callers_old = await factory.cookies(user)
    browser = await make_client(cookies=callers_old)
    current = user.password
    # Several changes in a row: the caller's fresh session always outlives the cutoff.
    for round_ in range(3):
        new = f"{NEW_PASSWORD} {round_}"
        response = await change(browser, currentPassword=current, newPassword=new)
        assert response.status == 200, await response.text()
        current = new
        assert (await browser.get("/test/required")).status == 200
        assert (await browser.get("/api/v1/users/me")).status == 200
    refreshed = await browser.post("/api/v1/auth/refresh")
    assert refreshed.status == 200
    assert (await browser.get("/test/required")).status == 200

    # Every other session: its access token and its refresh token are refused.
    for cookies in [*others, callers_old]:
        elsewhere = await make_client(cookies=cookies)
        assert (await elsewhere.get("/test/required")).status == 401
        assert (await refresh_with(make_client, cookies["refresh_token"])).status == 401
    live = await db.fetch_val(
        "SELECT count(*) FROM sessions WHERE user_id = %(u)s AND revoked_at IS NULL"
        " AND rotated_at IS NULL",
        {"u": user.id},
    )
    assert live == 1
    # Another user is untouched.
    strangers_browser = await make_client(cookies=strangers_cookies)
    assert (await strangers_browser.get("/test/required")).status == 200


async def test_the_new_password_is_validated_like_sign_up(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    for body, field in (
        ({"currentPassword": user.password, "newPassword": "short"}, "newPassword"),
        ({"currentPassword": user.password, "newPassword": "x" * 257}, "newPassword"),
        ({"currentPassword": user.password}, "newPassword"),
        ({"currentPassword": "", "newPassword": NEW_PASSWORD}, "currentPassword"),
        ({"currentPassword": user.password, "newPassword": NEW_PASSWORD, "x": 1}, "x"),
    ):
        response = await browser.post("/api/v1/auth/password", json=body)
        assert response.status == 422, body
        assert field in error_of(await response.json())["details"]["fields"], body
    assert await login_status(make_client, user.email, user.password) == 200


async def test_the_route_needs_a_session_and_an_allowed_origin(
    make_client: Any, factory: Any
) -> None:
    anonymous = await change(await make_client(), newPassword=NEW_PASSWORD)
    assert anonymous.status == 401
    assert error_of(await anonymous.json())["code"] == "UNAUTHORIZED"
    user = await factory.user(password=None)
    evil = await make_client(cookies=await factory.cookies(user), origin="https://evil.example")
    assert (await change(evil, newPassword=NEW_PASSWORD)).status == 403
    assert await login_status(make_client, user.email, NEW_PASSWORD) == 401


async def test_concurrent_first_passwords_set_one_and_refuse_the_other(
    make_client: Any, factory: Any
) -> None:
    """Two sessions of a user with no password race to set one: the loser would otherwise
    replace a password it never proved it knows."""
    user = await factory.user(password=None)
    first = await make_client(cookies=await factory.cookies(user))
    second = await make_client(cookies=await factory.cookies(user))
    responses = await asyncio.gather(
        change(first, newPassword="the first passphrase"),
        change(second, newPassword="the second passphrase"),
    )
    assert sorted(r.status for r in responses) == [200, 401]
    winner = "the first passphrase" if responses[0].status == 200 else "the second passphrase"
    loser = "the second passphrase" if responses[0].status == 200 else "the first passphrase"
    assert await login_status(make_client, user.email, winner) == 200
    assert await login_status(make_client, user.email, loser) == 401


async def test_a_pending_sign_up_link_does_not_overwrite_a_password_set_later(
    make_client: Any, mail_dir: Path
) -> None:
    """Verified through someone else's link, the owner sets a password; their own older link
    (still valid, its binding still in the browser) no longer replaces it."""
    await register(await make_client(), "owner@example.com", "someone else chose this")
    others_link = last_token(mail_dir, "owner@example.com")
    owner = await make_client()
    await register(owner, "owner@example.com", "the owner chose this once")
    owners_link = last_token(mail_dir, "owner@example.com")
    assert (await owner.post("/auth/verify-email", json={"token": others_link})).status == 200
    assert (await change(owner, newPassword=NEW_PASSWORD)).status == 200
    # Verifying ended every other link of the address: the owner's own older one is refused.
    used = await owner.post("/auth/verify-email", json={"token": owners_link})
    assert used.status == 422
    assert await login_status(make_client, "owner@example.com", NEW_PASSWORD) == 200
    assert await login_status(make_client, "owner@example.com", "the owner chose this once") == 401
