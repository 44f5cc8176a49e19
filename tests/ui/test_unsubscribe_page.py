"""The unsubscribe confirmation page over plain HTTP: the mailed link's GET changes nothing,
its button posts to the page (same origin, form token), and the API's one-click stays."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.notifications.unsubscribe import make_token
from tests.helpers import ORIGIN, SECRET
from tests.ui.test_pages_http import form_token

EVENT = "tenantd.member.joined"


async def preference(db: Any, user_id: uuid.UUID) -> Any:
    return await db.fetch_val(
        "SELECT enabled FROM notification_preferences"
        " WHERE user_id = %(u)s AND event_type = %(t)s AND channel = 'email'",
        {"u": user_id, "t": EVENT},
    )


async def test_the_page_asks_then_its_form_unsubscribes(
    env: dict[str, str], migrated: str, db: Any, aiohttp_client: Any, factory: Any
) -> None:
    settings = load_settings(environ={**env, "TENANTD_BUILTIN_NOTIFICATIONS": "true"})
    client = await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})
    user = await factory.user(password=None)
    token = make_token(SECRET, user_id=user.id, event_type=EVENT)
    path = f"/unsubscribe?token={token}"

    response = await client.get(path)
    assert response.status == 200
    assert "Stop emails about New members of your accounts?" in await response.text()
    assert await preference(db, user.id) is None  # a mail scanner's GET changes nothing

    # The button's post needs this browser's form token and this site's origin.
    csrf = await form_token(client, path, "/unsubscribe")
    refused = await client.post("/unsubscribe", data={"token": token})
    assert refused.status == 403
    cross = await client.post(
        "/unsubscribe",
        data={"token": token, "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert cross.status == 403
    assert await preference(db, user.id) is None

    done = await client.post("/unsubscribe", data={"token": token, "csrf": csrf})
    assert done.status == 200
    assert "no more emails about New members of your accounts" in await done.text()
    assert await preference(db, user.id) is False

    # RFC 8058 one-click from a mail client (no session, no page) still works on the API.
    await db.execute("DELETE FROM notification_preferences")
    one_click = await client.post(
        f"/api/v1/notifications/unsubscribe?token={token}",
        data="List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert one_click.status == 200
    assert await preference(db, user.id) is False
