"""The account's notification defaults page over plain HTTP: a member sees them read-only and
is refused a change; another account than the active one is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.ui.strings import EN
from tests.helpers import ORIGIN, PASSWORD
from tests.notifications.support import EVENT_MODULE
from tests.ui.test_pages_http import form_token


@pytest.fixture
async def signed_in(env: dict[str, str], migrated: str, aiohttp_client: Any) -> Any:
    async def sign_in(email: str) -> Any:
        settings = load_settings(environ={**env, "TENANTD_EVENT_MODULES": EVENT_MODULE})
        client = await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})
        token = await form_token(client, "/login")
        response = await client.post(
            "/login", data={"email": email, "password": PASSWORD, "csrf": token}
        )
        assert response.status == 200
        return client

    return sign_in


async def test_a_member_sees_the_defaults_but_cannot_change_them(
    signed_in: Any, factory: Any, db: Any
) -> None:
    owner = await factory.user(password=PASSWORD, plan="team")
    member = await factory.user(password=PASSWORD, account=False)
    await factory.member(owner.account_id, member.id)
    await db.execute(
        "INSERT INTO notification_account_defaults (account_id, event_type, channel, enabled)"
        " VALUES (%(a)s, 'comment.created', 'email', false)",
        {"a": owner.account_id},
    )
    client = await signed_in(member.email)
    path = f"/accounts/{owner.account_id}/notification-defaults"
    page = await client.get(path)
    assert page.status == 200
    text = await page.text()
    assert EN["defaults.read_only"] in text
    assert EN["defaults.save"] not in text
    assert "<select" not in text.split('id="quiet-hours"')[0].split("<table")[1]
    # The member's preferences page names the account's default and offers no defaults link.
    preferences = await (await client.get("/notifications/preferences")).text()
    assert EN["preferences.source_account"] in preferences
    assert EN["preferences.account_defaults"] not in preferences

    token = await form_token(client, path)
    refused = await client.post(
        path, data={"csrf": token, "default:comment.created:email": "on"}, allow_redirects=False
    )
    assert refused.status == 403
    assert EN["defaults.managers_only"].replace("'", "&#39;") in await refused.text()
    assert await db.fetch_val("SELECT enabled FROM notification_account_defaults") is False


async def test_the_owner_changes_only_the_active_accounts_defaults(
    signed_in: Any, factory: Any, db: Any
) -> None:
    owner = await factory.user(password=PASSWORD, plan="team")
    other = await factory.user(password=PASSWORD, plan="team")
    client = await signed_in(owner.email)
    path = f"/accounts/{owner.account_id}/notification-defaults"
    token = await form_token(client, path)
    saved = await client.post(
        path,
        data={
            "csrf": token,
            "default:comment.created:email": "off",
            "default:report.ready:in_app": "on",
            "default:ping.simple:sse": "",
            "default:report.ready:email": "sideways",  # not a choice: left alone
        },
    )
    assert saved.status == 200 and str(saved.url).endswith("?done=defaults")
    rows = await db.fetch_all(
        "SELECT event_type, channel, enabled FROM notification_account_defaults"
        " ORDER BY event_type, channel"
    )
    assert [tuple(r.values()) for r in rows] == [
        ("comment.created", "email", False),
        ("report.ready", "in_app", True),
    ]
    # Back to no default: the row goes.
    token = await form_token(client, path)
    await client.post(path, data={"csrf": token, "default:report.ready:in_app": ""})
    assert await db.fetch_val("SELECT count(*) FROM notification_account_defaults") == 1
    elsewhere = await client.get(f"/accounts/{other.account_id}/notification-defaults")
    assert elsewhere.status == 403
