"""SSE stream caps (per user: the oldest ends; per process: 503 with Retry-After) and prompt
removal of streams whose client left, with the keep-alive tick far beyond the test's bounds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.notifications import send
from tenantd.notifications.channels.sse.feed import FEED_KEY
from tenantd.notifications.domain import Notifications
from tenantd.settings import Settings
from tests.helpers import eventually
from tests.notifications.sse_client import STREAM, ServeLikeTestServer, open_stream


@pytest.fixture
def stream_caps() -> dict[str, str]:
    """Parametrize to set the cap variables; unset means the defaults."""
    return {}


@pytest.fixture
def env(env: dict[str, str], stream_caps: dict[str, str]) -> dict[str, str]:
    # No keep-alive write within any bound below: only the disconnect watch can notice a leaver.
    env["TENANTD_SSE_TICK_SECONDS"] = "60"
    env.update(stream_caps)
    return env


@pytest.fixture
async def server(db: Any, settings: Settings, migrated: str) -> AsyncIterator[ServeLikeTestServer]:
    """Handlers are not cancelled when their client leaves, as in production."""
    test_server = ServeLikeTestServer(create_app(settings, migrated))
    await test_server.start_server()
    try:
        yield test_server
    finally:
        await test_server.close()


def user_streams(app: web.Application, user_id: uuid.UUID) -> int:
    return len(app[FEED_KEY]._streams.get(user_id, ()))


def counts(app: web.Application, user_id: uuid.UUID, expected: int) -> Any:
    async def check() -> bool:
        return user_streams(app, user_id) == expected

    return check


async def ping(services: Notifications, user_id: uuid.UUID) -> uuid.UUID:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": 1})
    assert outcome.notification_id is not None
    return outcome.notification_id


async def test_a_stream_over_the_per_user_cap_ends_that_users_oldest(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user, other = await factory.user(), await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    others_stream = await open_stream(await make_client(cookies=await factory.cookies(other)))
    readers = [await open_stream(client) for _ in range(10)]  # the default cap
    await eventually(counts(app, user.id, 10))
    newest = await open_stream(client)
    oldest = readers.pop(0)
    assert await oldest.ended(within=10)
    assert "replaced by a newer stream of this user" in oldest.comments
    await eventually(counts(app, user.id, 10))
    assert user_streams(app, other.id) == 1
    # Every remaining stream, the newest included, is live; the other user's too.
    notification_id = await ping(services, user.id)
    for reader in [*readers, newest]:
        event = await reader.next_event(within=10)
        assert event is not None and event["id"] == str(notification_id)
    theirs = await ping(services, other.id)
    event = await others_stream.next_event(within=10)
    assert event is not None and event["id"] == str(theirs)


@pytest.mark.parametrize(
    "stream_caps",
    [{"NOTIFICATIONS_SSE_MAX_STREAMS": "3", "NOTIFICATIONS_SSE_MAX_STREAMS_PER_USER": "2"}],
)
async def test_over_the_process_cap_a_new_stream_gets_503_with_retry_after(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    alice, bob, carol = await factory.user(), await factory.user(), await factory.user()
    alice_client = await make_client(cookies=await factory.cookies(alice))
    alice_first = await open_stream(alice_client)
    await open_stream(alice_client)
    bob_stream = await open_stream(await make_client(cookies=await factory.cookies(bob)))
    await eventually(lambda: _total(app, 3))
    carol_client = await make_client(cookies=await factory.cookies(carol))
    response = await carol_client.get(STREAM)
    assert response.status == 503
    assert int(response.headers["Retry-After"]) > 0
    body = await response.json()
    assert body["success"] is False
    assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert body["error"]["details"]["retryAfter"] == int(response.headers["Retry-After"])
    assert user_streams(app, carol.id) == 0
    # Replacing one's own oldest stream adds nothing, so it is allowed at the process cap.
    await open_stream(alice_client)
    assert await alice_first.ended(within=10)
    await eventually(lambda: _total(app, 3))
    # A stream that ends frees its place.
    bob_stream.response.close()
    await eventually(lambda: _total(app, 2))
    await open_stream(carol_client)


async def _total(app: web.Application, expected: int) -> bool:
    return app[FEED_KEY].stream_count == expected


async def test_a_client_that_leaves_is_dropped_well_before_the_keep_alive_tick(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    staying = await open_stream(client)
    leaving = await open_stream(client)
    await eventually(counts(app, user.id, 2))
    leaving.response.close()  # closes the TCP connection, as a closed browser tab does
    # The tick is 60 s; the count drops within the disconnect check (1 s), bounded here by 10 s.
    await eventually(counts(app, user.id, 1), within=10)
    assert app[FEED_KEY].stream_count == 1
    staying.response.close()
    await eventually(counts(app, user.id, 0), within=10)
    assert f"notifications:user:{user.id}" not in app[FEED_KEY].hub.channels
