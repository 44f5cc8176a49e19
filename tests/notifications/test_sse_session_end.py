"""Ending a session from the sessions list (DELETE /api/v1/auth/sessions/{id}) ends that
session's open SSE streams; streams of the user's other sessions stay open."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from tenantd.app import AppServices
from tenantd.identity.tokens import decode_access_token
from tenantd.notifications import send
from tenantd.notifications.channels.sse.feed import FEED_KEY
from tests.helpers import SECRET, data, eventually
from tests.notifications.sse_client import open_stream


async def listening(app: web.Application, user_id: uuid.UUID) -> bool:
    return f"notifications:user:{user_id}" in app[FEED_KEY].hub.channels


async def test_ending_a_session_ends_its_stream_only(
    app: web.Application, services: AppServices, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    phone_cookies = await factory.cookies(user)
    laptop_cookies = await factory.cookies(user)
    phone_stream = await open_stream(await make_client(cookies=phone_cookies))
    laptop = await make_client(cookies=laptop_cookies)
    laptop_stream = await open_stream(await make_client(cookies=laptop_cookies))
    await eventually(lambda: listening(app, user.id))
    phone_sid = decode_access_token(SECRET, phone_cookies["auth_token"]).session_id
    await data(await laptop.delete(f"/api/v1/auth/sessions/{phone_sid}"))
    assert await phone_stream.ended()
    # The laptop's stream still delivers.
    outcome = await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    event = await laptop_stream.next_event()
    assert event is not None and event["id"] == str(outcome.notification_id)
