"""GET /api/v1/users/me/security-events: the user's own security log, newest first, written
in the transaction of each event (sign-in, sign-out, password, sessions, reuse)."""

from __future__ import annotations

from typing import Any

import pytest

from tenantd.db import Database
from tests.auth.helpers import last_token, mail_sent
from tests.factories import DEFAULT_PASSWORD
from tests.helpers import data, error

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/120.0.0.0 Safari/537.36"
)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["REFRESH_REUSE_INTERVAL_SECONDS"] = "0"  # strict rotation: a second use is reuse
    return env


async def login(make_client: Any, email: str) -> Any:
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login",
        json={"email": email, "password": DEFAULT_PASSWORD},
        headers={"User-Agent": CHROME},
    )
    assert response.status == 200, await response.text()
    return browser


async def types(browser: Any) -> list[str]:
    page = await data(await browser.get("/api/v1/users/me/security-events"))
    return [item["type"] for item in page["items"]]


async def test_the_flows_write_their_events(make_client: Any, factory: Any, db: Database) -> None:
    user, other = await factory.user(), await factory.user()
    browser = await login(make_client, user.email)
    page = await data(await browser.get("/api/v1/users/me/security-events"))
    [signed_in] = page["items"]
    assert signed_in["type"] == "signed_in"
    assert signed_in["data"] == {"method": "password", "newBrowser": False}
    assert signed_in["browser"] == "Chrome 120" and signed_in["os"] == "Windows 10"
    assert signed_in["ip"] == "127.0.0.1" and signed_in["sessionId"] is not None

    second = await login(make_client, user.email)
    sessions = await data(await browser.get("/api/v1/auth/sessions"))
    theirs = next(s["id"] for s in sessions if not s["current"])
    await data(await browser.delete(f"/api/v1/auth/sessions/{theirs}"))
    await login(make_client, user.email)
    await data(await browser.post("/api/v1/auth/sessions/revoke-others"))
    changed = await browser.post(
        "/api/v1/auth/password",
        json={"currentPassword": DEFAULT_PASSWORD, "newPassword": "another long passphrase"},
    )
    assert changed.status == 200, await changed.text()
    assert await types(browser) == [
        "password_changed",
        "other_sessions_revoked",
        "signed_in",
        "session_revoked",
        "signed_in",
        "signed_in",
    ]
    await data(await browser.post("/api/v1/auth/logout"))
    rows = await db.fetch_all(
        "SELECT type FROM security_events WHERE user_id = %(u)s ORDER BY id", {"u": user.id}
    )
    assert rows[-1]["type"] == "signed_out"
    # Another user sees only their own log.
    assert await types(await make_client(cookies=await factory.cookies(other))) == []
    assert second is not None


async def test_reuse_of_a_refresh_token_is_recorded(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    first = await make_client(cookies={"refresh_token": cookies["refresh_token"]})
    assert (await first.post("/api/v1/auth/refresh")).status == 200
    thief = await make_client(cookies={"refresh_token": cookies["refresh_token"]})
    assert (await thief.post("/api/v1/auth/refresh")).status == 401
    row = await db.fetch_one(
        "SELECT type, session_id FROM security_events WHERE user_id = %(u)s", {"u": user.id}
    )
    assert row is not None and row["type"] == "session_reuse_detected"
    assert row["session_id"] is not None


async def test_logout_everywhere_and_pagination(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    for _ in range(4):
        await login(make_client, user.email)
    browser = await login(make_client, user.email)
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = await data(await browser.get("/api/v1/users/me/security-events", params=params))
        seen.extend(item["id"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)
    await data(await browser.post("/api/v1/auth/logout-all"))
    again = await login(make_client, user.email)
    assert (await types(again))[:2] == ["signed_in", "signed_out_everywhere"]
    anonymous = await make_client()
    await error(await anonymous.get("/api/v1/users/me/security-events"), 401)


async def test_password_reset_is_recorded(
    make_client: Any, factory: Any, db: Database, mail_dir: Any
) -> None:
    user = await factory.user()
    browser = await make_client()
    requested = await browser.post(
        "/api/v1/auth/password-reset/request", json={"email": user.email}
    )
    assert requested.status == 200
    await mail_sent(browser)
    token = last_token(mail_dir, user.email, "/reset-password")
    confirmed = await browser.post(
        "/api/v1/auth/password-reset/confirm",
        json={"token": token, "password": "a brand new passphrase"},
        headers={"User-Agent": CHROME},
    )
    assert confirmed.status == 200, await confirmed.text()
    row = await db.fetch_one(
        "SELECT type, ip, user_agent FROM security_events WHERE user_id = %(u)s", {"u": user.id}
    )
    assert row == {"type": "password_reset", "ip": "127.0.0.1", "user_agent": CHROME}
