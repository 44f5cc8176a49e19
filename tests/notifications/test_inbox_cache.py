"""The cached inbox (first page, unread count) never shows a stale answer: writes on this
instance show on the very next request; writes elsewhere once the listener hears them (the
100 ms bound on that: tests/identity/test_principal_cache.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from tenantd.app.bundle import domains_of
from tenantd.app.factory import create_app
from tenantd.jobs.kinds import JobInfo
from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tenantd.notifications.inbox_cache import InboxCache
from tenantd.notifications.jobs import run_dispatch_batch
from tests.helpers import ORIGIN, eventually

LIST = "/api/v1/notifications?limit=5"
COUNT = "/api/v1/notifications/unread-count"


async def ping(services: Notifications, user_id: uuid.UUID, n: int) -> None:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": n})
    assert outcome.notification_id is not None


async def titles(browser: Any) -> list[str]:
    body = await (await browser.get(LIST)).json()
    return [item["title"] for item in body["data"]["items"]]


async def count(browser: Any) -> int:
    return int((await (await browser.get(COUNT)).json())["data"]["count"])


async def test_cached_answers_follow_every_write_on_this_instance(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    await ping(services, user.id, 1)
    assert await titles(browser) == ["Ping 1"]
    assert await count(browser) == 1

    async def cached() -> bool:
        # The write's own announcement comes back from the relay a moment after its commit
        # and drops the user's answers once more; read until they are cached.
        assert await titles(browser) == ["Ping 1"]
        assert await count(browser) == 1
        return services.inbox_cache.get(user.id, "unread") == 1

    await eventually(cached)
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
    services: Notifications, factory: Any, make_client: Any
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
    services: Notifications,
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


def batch_job(n: int, user_id: uuid.UUID) -> tuple[JobInfo, dict[str, Any]]:
    payload = {
        "notificationId": str(uuid.uuid4()),
        "eventType": "ping.simple",
        "recipientUserId": str(user_id),
        "accountId": None,
        "payload": {"n": n},
    }
    return JobInfo(id=n, kind="notifications.dispatch", attempts=1, max_attempts=8), payload


async def test_one_announcement_names_every_user_a_statement_wrote(
    app: web.Application,
    services: Notifications,
    factory: Any,
    settings: Any,
    migrated: str,
    aiohttp_client: Any,
    make_client: Any,
) -> None:
    """A batch of dispatches to three users is one statement: one NOTICE and one NOTIFY list
    all three (sql/0191). Each user's cached count is fresh at once here, and on another
    instance once it hears the one message."""
    other = await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})
    users = [await factory.user() for _ in range(3)]
    here = [await make_client(cookies=await factory.cookies(user)) for user in users]
    there = []
    for user in users:
        client = await aiohttp_client(other.server, headers={"Origin": ORIGIN})
        client.session.cookie_jar.update_cookies(await factory.cookies(user))
        there.append(client)
    for browser in here + there:
        assert await count(browser) == 0  # cached
    notices: list[list[str]] = []
    original = domains_of(app).apply_notices

    def recorded(batch: list[str]) -> None:
        notices.append(batch)
        original(batch)

    services.db.notice_sink = recorded
    try:
        results = await run_dispatch_batch(
            services, [batch_job(n, user.id) for n, user in enumerate(users)]
        )
    finally:
        services.db.notice_sink = original
    assert results == [None, None, None]
    announced = [notice for batch in notices for notice in batch if "inbox" in notice]
    assert len(announced) == 1 and "tenantd_cache:inboxes:" in announced[0]
    assert all(str(user.id) in announced[0] for user in users)
    for browser in here:
        assert await count(browser) == 1  # this instance: at once
    deadline = time.monotonic() + 30
    for browser in there:
        while await count(browser) != 1:
            assert time.monotonic() < deadline, "stale unread count on the other instance"


async def test_a_list_of_inboxes_invalidates_each_and_only_them() -> None:
    cache = InboxCache()
    cache.enabled = True
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for user in (a, b, c):
        cache.store(user, "unread", 1, cache.version())
    cache.apply(f"inboxes:{a},{b}")  # as the listener hears it
    assert cache.get(a, "unread") is None and cache.get(b, "unread") is None
    assert cache.get(c, "unread") == 1
    cache.store(a, "unread", 2, cache.version())
    cache.apply_notices([f"NOTICE:  tenantd_cache:inboxes:{a},{c}\n"])  # as the writer sees it
    assert cache.get(a, "unread") is None and cache.get(c, "unread") is None
    cache.store(b, "unread", 3, cache.version())
    cache.apply("inboxes:not-a-uuid")  # unreadable: nothing cached can be trusted
    assert cache.get(b, "unread") is None


async def test_a_users_own_change_or_an_accounts_drops_the_inbox_and_marks_the_user() -> None:
    """What the one context cache did before the inboxes had their own: `user:` drops that
    user's answers (and tells the replica marks), `account:` and `all` drop every one; token
    announcements leave them."""
    cache = InboxCache()
    cache.enabled = True
    marked: list[uuid.UUID] = []
    cache.on_change = marked.append
    a, b = uuid.uuid4(), uuid.uuid4()
    for user in (a, b):
        cache.store(user, "unread", 1, cache.version())
    cache.apply(f"user:{a}")
    assert cache.get(a, "unread") is None and cache.get(b, "unread") == 1
    assert marked == [a]
    cache.apply(f"jti:{uuid.uuid4()}")
    cache.apply(f"session:{uuid.uuid4()}")
    assert cache.get(b, "unread") == 1
    cache.apply(f"account:{uuid.uuid4()}")
    assert cache.get(b, "unread") is None
    cache.store(b, "unread", 2, cache.version())
    cache.apply_notices([f"NOTICE:  tenantd_cache:inbox:{b}\n"] * 50)  # some were dropped
    assert cache.get(b, "unread") is None


async def test_inbox_pages_stay_within_their_byte_budget() -> None:
    cache = InboxCache(budget_bytes=10_000)
    cache.enabled = True
    users = [uuid.uuid4() for _ in range(30)]
    for user in users:
        cache.store(user, "page", b"x" * 1_000, cache.version())
    kept = [user for user in users if cache.get(user, "page") is not None]
    assert kept == users[-10:]  # the oldest went first
    cache.store(users[-1], "page", b"y" * 5_000, cache.version())
    assert cache.get(users[-1], "page") == b"y" * 5_000
    assert sum(cache.get(u, "page") is not None for u in users) == 6  # 5 x 1,000 + 5,000


async def test_inbox_race_is_refused_even_after_its_invalidation_was_forgotten() -> None:
    cache = InboxCache(changes_kept=100)
    cache.enabled = True
    user = uuid.uuid4()
    version = cache.version()  # a load begins
    cache.invalidate(user)  # a notification lands meanwhile
    for _ in range(1_000):  # ... followed by many others for other users
        cache.invalidate(uuid.uuid4())
    assert len(cache._changed) == 100  # what is remembered stays bounded
    cache.store(user, "unread", 3, version)
    assert cache.get(user, "unread") is None
    cache.store(user, "unread", 4, cache.version())  # a fresh load stores
    assert cache.get(user, "unread") == 4
