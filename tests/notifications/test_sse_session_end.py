"""Ending a session from the sessions list (DELETE /api/v1/auth/sessions/{id}) ends that
session's open SSE streams at once, not at the next idle tick (30 s here); streams of the
user's other sessions stay open."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp import web

from tenantd.notifications import send
from tenantd.notifications.channels.sse.feed import FEED_KEY
from tenantd.notifications.domain import Notifications
from tests.helpers import access_claims, data, eventually
from tests.notifications.sse_client import open_stream

PROMPTLY = 5.0  # seconds: far below the idle tick


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_SSE_TICK_SECONDS"] = "30"  # an idle re-check would come far too late
    return env


async def listening(app: web.Application, user_id: uuid.UUID) -> bool:
    return f"notifications:user:{user_id}" in app[FEED_KEY].hub.channels


async def test_ending_a_session_ends_its_stream_only(
    app: web.Application, services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    phone_cookies = await factory.cookies(user)
    laptop_cookies = await factory.cookies(user)
    phone_stream = await open_stream(await make_client(cookies=phone_cookies))
    laptop = await make_client(cookies=laptop_cookies)
    laptop_stream = await open_stream(await make_client(cookies=laptop_cookies))
    await eventually(lambda: listening(app, user.id))
    phone_sid = access_claims(app, phone_cookies["auth_token"]).session_id
    await data(await laptop.delete(f"/api/v1/auth/sessions/{phone_sid}"))
    assert await phone_stream.ended(within=PROMPTLY)
    # The laptop's stream still delivers.
    outcome = await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    event = await laptop_stream.next_event()
    assert event is not None and event["id"] == str(outcome.notification_id)


async def test_logout_everywhere_ends_streams_at_once(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    streams = [await open_stream(await make_client(cookies=cookies)) for _ in range(2)]
    await eventually(lambda: listening(app, user.id))
    other = await make_client(cookies=await factory.cookies(user))
    assert (await other.post("/api/v1/auth/logout-all")).status == 200
    for stream in streams:
        assert await stream.ended(within=PROMPTLY)
