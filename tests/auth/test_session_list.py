"""Sessions the user can see and end: GET /api/v1/auth/sessions, DELETE one (its tokens are
refused at once, here and on a second instance), revoke-others, 404 for another user's id."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.identity.devices import describe
from tests.factories import DEFAULT_PASSWORD
from tests.helpers import ORIGIN, access_claims, data, error, eventually

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/120.0.0.0 Safari/537.36"
)
FIREFOX = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
SAFARI_IOS = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15"
    " (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
)


async def sign_in(make_client: Any, user: Any, agent: str = CHROME) -> Any:
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login",
        json={"email": user.email, "password": DEFAULT_PASSWORD},
        headers={"User-Agent": agent},
    )
    assert response.status == 200, await response.text()
    return browser


def sid_of(browser: Any) -> uuid.UUID:
    token = browser.session.cookie_jar.filter_cookies(browser.make_url("/"))["auth_token"].value
    sid = access_claims(browser, token).session_id
    assert sid is not None
    return sid


def test_user_agents_are_parsed_into_browser_and_os() -> None:
    assert describe(CHROME).browser == "Chrome 120"
    assert describe(CHROME).os == "Windows 10"
    assert describe(FIREFOX).browser == "Firefox 121"
    assert describe(FIREFOX).os == "Ubuntu"
    assert describe(SAFARI_IOS).browser == "Mobile Safari 17"
    assert describe(SAFARI_IOS).os == "iOS 17"
    assert describe(None).browser is None and describe("").os is None
    # Garbage is "unknown", never an error.
    assert describe("\x00garbage/").browser is None


async def test_list_shows_each_sign_in_with_its_details(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    chrome = await sign_in(make_client, user, CHROME)
    await sign_in(make_client, user, FIREFOX)
    sessions = await data(await chrome.get("/api/v1/auth/sessions"))
    assert len(sessions) == 2
    assert set(sessions[0]) == {
        "id",
        "current",
        "createdAt",
        "lastUsedAt",
        "ip",
        "browser",
        "os",
        "method",
    }
    mine = [s for s in sessions if s["current"]]
    assert len(mine) == 1
    assert mine[0]["id"] == str(sid_of(chrome))
    assert mine[0]["browser"] == "Chrome 120" and mine[0]["os"] == "Windows 10"
    assert mine[0]["method"] == "password"
    assert mine[0]["ip"] == "127.0.0.1"
    other = next(s for s in sessions if not s["current"])
    assert other["browser"] == "Firefox 121"


async def test_refresh_keeps_one_session_and_moves_last_used(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    browser = await sign_in(make_client, user)
    [before] = await data(await browser.get("/api/v1/auth/sessions"))
    refreshed = await browser.post("/api/v1/auth/refresh", headers={"User-Agent": FIREFOX})
    assert refreshed.status == 200
    [after] = await data(await browser.get("/api/v1/auth/sessions"))
    assert after["id"] == before["id"]  # the same family
    assert after["createdAt"] == before["createdAt"]  # the sign-in time is carried forward
    assert after["lastUsedAt"] > before["lastUsedAt"]
    assert after["method"] == "password"
    assert after["browser"] == "Firefox 121"  # the last request's agent


async def test_ended_and_expired_sessions_are_not_listed(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    browser = await sign_in(make_client, user)
    gone = await sign_in(make_client, user)
    assert (await gone.post("/api/v1/auth/logout")).status == 200
    stale = await sign_in(make_client, user)
    await db.execute(
        "UPDATE sessions SET expires_at = now() - interval '1 second' WHERE family_id = %(f)s",
        {"f": sid_of(stale)},
    )
    sessions = await data(await browser.get("/api/v1/auth/sessions"))
    assert [s["id"] for s in sessions] == [str(sid_of(browser))]


async def test_deleting_a_session_refuses_its_access_token_at_once(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    phone = await sign_in(make_client, user, SAFARI_IOS)
    laptop = await sign_in(make_client, user, CHROME)
    assert (await phone.get("/api/v1/users/me")).status == 200  # cached on this instance
    response = await laptop.delete(f"/api/v1/auth/sessions/{sid_of(phone)}")
    await data(response)
    # The very next request with the phone's (unexpired) access token is refused...
    await error(await phone.get("/api/v1/users/me"), 401)
    # ...and so is its refresh token.
    await error(await phone.post("/api/v1/auth/refresh"), 401)
    assert (await laptop.get("/api/v1/users/me")).status == 200
    sessions = await data(await laptop.get("/api/v1/auth/sessions"))
    assert [s["id"] for s in sessions] == [str(sid_of(laptop))]
    # Twice: it is no longer a live session.
    await error(await laptop.delete(f"/api/v1/auth/sessions/{sid_of(phone)}"), 404, "NOT_FOUND")


async def test_another_users_session_is_not_found_and_survives(
    make_client: Any, factory: Any
) -> None:
    alice, mallory = await factory.user(), await factory.user()
    victim = await sign_in(make_client, alice)
    attacker = await sign_in(make_client, mallory)
    await error(await attacker.delete(f"/api/v1/auth/sessions/{sid_of(victim)}"), 404, "NOT_FOUND")
    await error(await attacker.delete(f"/api/v1/auth/sessions/{uuid.uuid4()}"), 404, "NOT_FOUND")
    await error(await attacker.delete("/api/v1/auth/sessions/not-a-uuid"), 404)
    assert (await victim.get("/api/v1/users/me")).status == 200
    assert len(await data(await victim.get("/api/v1/auth/sessions"))) == 1


async def test_deleting_the_current_session_signs_this_browser_out(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    browser = await sign_in(make_client, user)
    sid = sid_of(browser)
    response = await browser.delete(f"/api/v1/auth/sessions/{sid}")
    await data(response)
    cleared = {c.key: c["max-age"] for c in response.cookies.values()}
    assert cleared.get("auth_token") == "0" and cleared.get("refresh_token") == "0"


async def test_revoke_others_keeps_only_this_session(make_client: Any, factory: Any) -> None:
    user, bystander = await factory.user(), await factory.user()
    keep = await sign_in(make_client, user)
    others = [await sign_in(make_client, user, agent) for agent in (FIREFOX, SAFARI_IOS)]
    unrelated = await sign_in(make_client, bystander)
    result = await data(await keep.post("/api/v1/auth/sessions/revoke-others"))
    assert result == {"revoked": 2}
    for other in others:
        await error(await other.get("/api/v1/users/me"), 401)
    assert (await keep.get("/api/v1/users/me")).status == 200
    assert (await unrelated.get("/api/v1/users/me")).status == 200
    assert [s["id"] for s in await data(await keep.get("/api/v1/auth/sessions"))] == [
        str(sid_of(keep))
    ]
    assert await data(await keep.post("/api/v1/auth/sessions/revoke-others")) == {"revoked": 0}


async def test_session_routes_need_a_session(client: Any) -> None:
    await error(await client.get("/api/v1/auth/sessions"), 401)
    await error(await client.post("/api/v1/auth/sessions/revoke-others"), 401)
    await error(await client.delete(f"/api/v1/auth/sessions/{uuid.uuid4()}"), 401)


async def test_a_second_instance_refuses_the_ended_session_soon(
    make_client: Any,
    factory: Any,
    settings: Any,
    migrated: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
) -> None:
    """The other instance had the token cached; the NOTIFY of the revocation drops it."""
    other = await aiohttp_server(create_app(settings, migrated))
    user = await factory.user()
    phone = await sign_in(make_client, user, SAFARI_IOS)
    laptop = await sign_in(make_client, user, CHROME)
    on_b = await aiohttp_client(other, headers={"Origin": ORIGIN})
    jar = phone.session.cookie_jar.filter_cookies(phone.make_url("/"))
    on_b.session.cookie_jar.update_cookies({k: v.value for k, v in jar.items()})
    assert (await on_b.get("/api/v1/users/me")).status == 200
    assert (await on_b.get("/api/v1/users/me")).status == 200  # served from B's cache
    await data(await laptop.delete(f"/api/v1/auth/sessions/{sid_of(phone)}"))

    async def refused_on_b() -> bool:
        return (await on_b.get("/api/v1/users/me")).status == 401

    await eventually(refused_on_b, within=10)
    assert isinstance(other.app, web.Application)
