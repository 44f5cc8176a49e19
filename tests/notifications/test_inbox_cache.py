"""The cached inbox (first page, unread count) never shows a stale answer: writes on this
instance show on the very next request; writes elsewhere once the listener hears them (the
100 ms bound on that: tests/perf/test_context_cache.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from tenantd.app import AppServices, create_app
from tenantd.notifications import send
from tests.helpers import ORIGIN

LIST = "/api/v1/notifications?limit=5"
COUNT = "/api/v1/notifications/unread-count"


async def ping(services: AppServices, user_id: uuid.UUID, n: int) -> None:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": n})
    assert outcome.notification_id is not None


async def titles(browser: Any) -> list[str]:
    body = await (await browser.get(LIST)).json()
    return [item["title"] for item in body["data"]["items"]]


async def count(browser: Any) -> int:
    return int((await (await browser.get(COUNT)).json())["data"]["count"])


async def test_cached_answers_follow_every_write_on_this_instance(
    app: web.Application, services: AppServices, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    await ping(services, user.id, 1)
    assert await titles(browser) == ["Ping 1"]
    assert await count(browser) == 1
    hits = services.context_cache.inbox(user.id, "unread")
    assert hits == 1  # cached now
    await ping(services, user.id, 2)  # a write: the next answer is fresh
    assert await titles(browser) == ["Ping 2", "Ping 1"]
    assert await count(browser) == 2
    first = (await (await browser.get(LIST)).json())["data"]["items"][0]["id"]
    assert (await browser.post(f"/api/v1/notifications/{first}/read")).status == 200
    assert await count(browser) == 1
    unread = await (await browser.get(LIST + "&status=unread")).json()
    assert [i["title"] for i in unread["data"]["items"]] == ["Ping 1"]
    assert (await browser.post("/api/v1/notifications/read-all")).status == 200
    assert await count(browser) == 0


async def test_users_do_not_share_cached_pages(
    services: AppServices, factory: Any, make_client: Any
) -> None:
    alice, bob = await factory.user(), await factory.user()
    await ping(services, alice.id, 1)
    alice_browser = await make_client(cookies=await factory.cookies(alice))
    bob_browser = await make_client(cookies=await factory.cookies(bob))
    assert await titles(alice_browser) == ["Ping 1"]
    assert await titles(bob_browser) == []
    assert await count(bob_browser) == 0


async def test_a_write_on_another_instance_shows_once_heard(
    app: web.Application,
    services: AppServices,
    factory: Any,
    settings: Any,
    migrated: str,
    aiohttp_client: Any,
) -> None:
    other = await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})
    user = await factory.user()
    other.session.cookie_jar.update_cookies(await factory.cookies(user))
    assert await count(other) == 0  # cached on the other instance
    assert await count(other) == 0
    await ping(services, user.id, 1)  # dispatched by this instance
    deadline = time.monotonic() + 30  # generous: the machine may be busy
    while await count(other) != 1:
        assert time.monotonic() < deadline, "stale unread count on and on"
