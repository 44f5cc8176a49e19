"""SSE: frames, cross-instance delivery over LISTEN/NOTIFY, token re-checks, replay,
slow-client overflow, listener reconnect, 404 when switched off."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiopg
import pytest
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import CHANNEL
from tenantd.notifications import send
from tenantd.notifications.channels.sse.endpoint import REPLAY_LOOKBACK_SECONDS
from tenantd.notifications.channels.sse.feed import FEED_KEY, StreamQueue
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.notifications.queries import user_topic
from tenantd.pubsub.hub import PUBSUB
from tests.factories import wait_until_heard
from tests.helpers import ORIGIN, eventually
from tests.notifications.sse_client import STREAM, open_stream

FIELDS = {"id", "eventType", "title", "body", "ctaUrl", "ctaLabel", "status", "readAt", "createdAt"}


async def ping(services: Notifications, user_id: uuid.UUID, n: int = 1) -> uuid.UUID:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": n})
    assert outcome.notification_id is not None
    return outcome.notification_id


async def listening(app: web.Application, user_id: uuid.UUID) -> bool:
    return f"notifications:user:{user_id}" in app[FEED_KEY].hub.channels


async def test_stream_frames_carry_id_and_envelope(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    reader = await open_stream(client)
    await eventually(lambda: listening(app, user.id))
    notification_id = await ping(services, user.id, 7)
    event = await reader.next_event()
    assert event is not None
    assert set(event) == {"id", "data"}  # no `event:` field: EventSource.onmessage gets it
    assert event["id"] == str(notification_id)
    body = json.loads(event["data"])
    assert body["type"] == "notification.created"
    assert set(body["notification"]) == FIELDS
    assert body["notification"]["id"] == str(notification_id)
    assert body["notification"]["title"] == "Ping 7"
    assert body["notification"]["status"] == "unread"
    # Idle ticks send keep-alive comments (tick is 0.3 s in these tests), and no event.
    await reader.keep_alive()


async def test_a_user_only_receives_their_own_notifications(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    alice, bob = await factory.user(), await factory.user()
    reader = await open_stream(await make_client(cookies=await factory.cookies(alice)))
    await eventually(lambda: listening(app, alice.id))
    await ping(services, bob.id, 1)
    mine = await ping(services, alice.id, 2)
    event = await reader.next_event()
    assert event is not None and event["id"] == str(mine)


async def test_client_on_instance_a_receives_what_instance_b_dispatched(
    app: web.Application,
    settings: Any,
    migrated: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
    factory: Any,
    make_client: Any,
) -> None:
    other = await aiohttp_server(create_app(settings, migrated))
    services_b = notifications_of(other.app)
    user = await factory.user()
    cookies = await factory.cookies(user)
    on_a = await open_stream(await make_client(cookies=cookies))
    client_b = await aiohttp_client(other, headers={"Origin": ORIGIN})
    client_b.session.cookie_jar.update_cookies(cookies)
    on_b = await open_stream(client_b)
    await eventually(lambda: listening(app, user.id))
    await eventually(lambda: listening(other.app, user.id))
    from_b = await ping(services_b, user.id, 1)
    from_a = await ping(notifications_of(app), user.id, 2)
    for reader in (on_a, on_b):
        first, second = await reader.next_event(), await reader.next_event()
        assert first is not None and second is not None
        assert {first["id"], second["id"]} == {str(from_b), str(from_a)}


async def test_logout_all_ends_an_open_stream(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    reader = await open_stream(await make_client(cookies=cookies))
    await eventually(lambda: listening(app, user.id))
    await ping(services, user.id, 1)
    assert await reader.next_event() is not None
    other_tab = await make_client(cookies=cookies)
    response = await other_tab.post("/api/v1/auth/logout-all")
    assert response.status == 200
    assert await reader.ended()
    # The stream's listener is gone too.
    await eventually(lambda: _not(listening(app, user.id)))


async def _not(value: Any) -> bool:
    return not await value


async def test_a_message_after_revocation_is_not_delivered(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    """The re-check runs before each buffered message, not only on ticks."""
    user = await factory.user()
    reader = await open_stream(await make_client(cookies=await factory.cookies(user)))
    await eventually(lambda: listening(app, user.id))
    await services.db.execute(
        "UPDATE users SET tokens_valid_after = now() + interval '1 second' WHERE id = %(u)s",
        {"u": user.id},
    )
    await ping(services, user.id, 1)
    assert await reader.next_event() is None


async def test_last_event_id_replays_what_was_missed(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    ids = [await ping(services, user.id, n) for n in range(4)]
    # Their live copies are published by the relay, late on a busy machine: heard here,
    # before the stream opens, none of them can pass for a frame of the stream.
    await wait_until_heard(services.db, app[PUBSUB], user_topic(user.id))
    client = await make_client(cookies=await factory.cookies(user))
    # ids[0] was made before ids[1] but could have committed after it: the look-back sends
    # it again (at least once; a client drops ids it has); ids[1] itself is not repeated.
    reader = await open_stream(client, headers={"Last-Event-ID": str(ids[1])})
    replayed = [await reader.next_event() for _ in range(3)]
    assert [e["id"] for e in replayed if e] == [str(ids[0]), str(ids[2]), str(ids[3])]
    await eventually(lambda: listening(app, user.id))
    live = await ping(services, user.id, 9)
    event = await reader.next_event()
    assert event is not None and event["id"] == str(live)
    # Someone else's id replays nothing.
    stranger = await factory.user()
    foreign = await ping(services, stranger.id, 1)
    other = await open_stream(client, headers={"Last-Event-ID": str(foreign)})
    with pytest.raises(TimeoutError):
        await other.next_event(within=0.5)


async def test_replay_resends_a_notification_that_committed_after_the_last_event_id(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    """Three instances dispatch for one user: `late` began first (its created_at is its
    transaction's start) but committed after `seen`, whose frame reached the reader before
    its stream broke. Replaying strictly after `seen` would lose `late`; the look-back does
    not, and a notification older than the look-back is not replayed again."""
    user = await factory.user()
    ancient, late, seen = [await ping(services, user.id, n) for n in range(3)]
    await services.db.execute(
        "UPDATE notifications SET created_at = created_at - make_interval(secs => %(s)s)"
        " WHERE id = %(id)s",
        {"s": REPLAY_LOOKBACK_SECONDS + 5, "id": ancient},
    )
    await services.db.execute(
        "UPDATE notifications SET created_at = (SELECT created_at FROM notifications"
        "  WHERE id = %(seen)s) - interval '2 seconds' WHERE id = %(late)s",
        {"seen": seen, "late": late},
    )
    await wait_until_heard(services.db, app[PUBSUB], user_topic(user.id))  # no late live copy
    client = await make_client(cookies=await factory.cookies(user))
    reader = await open_stream(client, headers={"Last-Event-ID": str(seen)})
    event = await reader.next_event()
    assert event is not None and event["id"] == str(late)
    with pytest.raises(TimeoutError):
        await reader.next_event(within=0.5)


async def test_a_slow_client_overflows_and_only_its_stream_ends(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    slow_user, other_user = await factory.user(), await factory.user()
    slow = await open_stream(await make_client(cookies=await factory.cookies(slow_user)))
    other = await open_stream(await make_client(cookies=await factory.cookies(other_user)))
    await eventually(lambda: listening(app, slow_user.id))
    await eventually(lambda: listening(app, other_user.id))
    [victim] = app[FEED_KEY]._streams[slow_user.id]
    for _ in range(victim.maxsize + 1):  # one burst, faster than any writer drains
        victim.offer(uuid.uuid4(), b"{}")
    assert victim.overflowed
    assert await slow.ended()
    notification_id = await ping(services, other_user.id, 1)
    event = await other.next_event()
    assert event is not None and event["id"] == str(notification_id)


def test_stream_queue_bounds() -> None:
    queue = StreamQueue(2)
    queue.offer(uuid.uuid4(), b"a")
    queue.offer(uuid.uuid4(), b"b")
    assert not queue.overflowed
    queue.offer(uuid.uuid4(), b"c")
    assert queue.overflowed and len(queue.items) == 2


async def test_listener_reconnects_and_streams_catch_up(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    reader = await open_stream(await make_client(cookies=await factory.cookies(user)))
    await eventually(lambda: listening(app, user.id))
    first = await ping(services, user.id, 1)
    assert (await reader.next_event() or {}).get("id") == str(first)
    hub = app[FEED_KEY].hub
    pid = hub.backend_pid()
    assert pid is not None
    assert services.settings.database.url is not None
    from tenantd.db.dsn import url_to_dsn

    dsn = url_to_dsn(services.settings.database.url)
    async with aiopg.connect(dsn, enable_hstore=False) as conn, conn.cursor() as cur:
        await cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    during = await ping(services, user.id, 2)  # published while nobody listens, maybe
    event = await reader.next_event()
    assert event is not None and event["id"] == str(during)
    await eventually(lambda: _reconnected(hub, pid))
    after = await ping(services, user.id, 3)
    event = await reader.next_event()
    assert event is not None and event["id"] == str(after)


async def _reconnected(hub: Any, old_pid: int) -> bool:
    pid = hub.backend_pid()
    return pid is not None and pid != old_pid


async def test_stream_requires_a_session(client: Any) -> None:
    response = await client.get(STREAM)
    assert response.status == 401


@pytest.mark.parametrize("sse_enabled", [False])
async def test_stream_is_404_when_switched_off(factory: Any, make_client: Any) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    response = await client.get(STREAM)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "NOT_FOUND"


async def test_shutdown_ends_streams_with_a_final_comment(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    reader = await open_stream(client)
    await eventually(lambda: listening(app, user.id))
    app[FEED_KEY].close_all()  # what SIGTERM's on_shutdown does
    assert await reader.ended()
    assert "server shutting down" in reader.comments


async def test_a_stream_opened_during_the_drain_ends_at_once(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    """After SIGTERM's on_shutdown the drain still serves requests on open keep-alive
    connections: a browser's EventSource reconnecting on one of them gets a stream that ends
    at once (to reconnect elsewhere), not one the shutdown then waits on until its bound."""
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    app[FEED_KEY].close_all()  # what SIGTERM's on_shutdown does
    reader = await open_stream(client)
    assert await reader.ended()
    assert "server shutting down" in reader.comments
    assert not await listening(app, user.id)


async def test_hot_stream_rechecks_the_token_from_the_principal_cache(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    """Re-checks before each message cost no query while the cache holds the token, and
    logout still ends the stream before the next message."""
    user = await factory.user()
    cookies = await factory.cookies(user)
    client = await make_client(cookies=cookies)
    reader = await open_stream(client)
    await eventually(lambda: listening(app, user.id))
    # A late NOTIFY of the factory's rows would flush the cached token between the stream's
    # check and the re-check: wait until all is heard, then cache the token again.
    await wait_until_heard(services.db, app[PUBSUB], CHANNEL)
    assert (await client.get("/api/v1/users/me")).status == 200
    cache = app[DOMAINS].identity.principal_cache
    hits = cache.hits
    await ping(services, user.id, 1)
    assert await reader.next_event() is not None
    assert cache.hits > hits
    assert (await client.post("/api/v1/auth/logout")).status == 200
    await ping(services, user.id, 2)
    assert await reader.next_event() is None  # ended before delivering message 2


async def test_one_listen_connection_per_process(app: web.Application) -> None:
    """The SSE feed and the caches share the process's one pub/sub hub."""
    hub = app[PUBSUB]
    assert app[FEED_KEY].hub is hub
    assert "tenantd_cache" in hub.channels
    assert app[DOMAINS].identity.principal_cache.serving
    assert hub.backend_pid() is not None


async def test_an_open_stream_ends_when_its_account_starts_requiring_a_factor(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    """A stream of a session that used no second factor ends once its account requires MFA
    (the account's change reaches the cached context), as its next request would be refused."""
    user = await factory.user()
    reader = await open_stream(await make_client(cookies=await factory.cookies(user)))
    await eventually(lambda: listening(app, user.id))
    await ping(services, user.id, 1)
    assert await reader.next_event() is not None
    await services.db.execute(
        "UPDATE accounts SET require_mfa = true WHERE id = %(a)s", {"a": user.account_id}
    )
    await wait_until_heard(services.db, app[PUBSUB], CHANNEL)
    await ping(services, user.id, 1)
    assert await reader.next_event() is None
