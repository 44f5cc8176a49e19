"""Account-level notification defaults: an owner or admin sets them, members read them, they
apply to notifications sent with the account's id, and a user's own choice wins."""

from __future__ import annotations

from typing import Any

from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tests.factories import Factory, UserRecord
from tests.helpers import data, error
from tests.notifications.support import deliveries, quiesce


async def signed_in(make_client: Any, factory: Factory, user: UserRecord, aid: Any) -> Any:
    client = await make_client()
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user, aid), response_url=client.make_url("/")
    )
    return client


async def test_defaults_apply_and_the_users_choice_wins(
    services: Notifications, factory: Factory, make_client: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    member = await factory.user(password=None)
    chooser = await factory.user(password=None)
    account = owner.account_id
    await factory.member(account, member.id, "member")
    await factory.member(account, chooser.id, "member")
    owner_client = await signed_in(make_client, factory, owner, account)
    url = f"/api/v1/accounts/{account}/notification-defaults"
    body = {"eventType": "report.ready", "channel": "email", "enabled": False}
    assert await data(await owner_client.put(url, json=body)) == body

    member_client = await signed_in(make_client, factory, member, account)
    await error(await member_client.put(url, json=body), 403, "FORBIDDEN")
    assert await data(await member_client.get(url)) == [body]

    chooser_client = await signed_in(make_client, factory, chooser, account)
    await data(
        await chooser_client.put(
            "/api/v1/notifications/preferences",
            json={"eventType": "report.ready", "channel": "email", "enabled": True},
        )
    )
    shown = await data(await member_client.get("/api/v1/notifications/preferences"))
    [report] = [e for e in shown if e["eventType"] == "report.ready"]
    assert {c["channel"]: (c["enabled"], c["source"]) for c in report["channels"]} == {
        "in_app": (True, "default"),
        "email": (False, "account"),
    }
    shown = await data(await chooser_client.get("/api/v1/notifications/preferences"))
    [report] = [e for e in shown if e["eventType"] == "report.ready"]
    assert {c["channel"]: c["source"] for c in report["channels"]}["email"] == "user"

    payload = {"reportName": "Q3", "rows": 1}
    to_member = await send(
        services, "report.ready", recipient_user_id=member.id, payload=payload, account_id=account
    )
    to_chooser = await send(
        services, "report.ready", recipient_user_id=chooser.id, payload=payload, account_id=account
    )
    elsewhere = await send(services, "report.ready", recipient_user_id=member.id, payload=payload)
    await quiesce(services)
    assert (await deliveries(services, to_member.notification_id))["email"] == (
        "suppressed",
        "preference_disabled",
    )
    assert (await deliveries(services, to_chooser.notification_id))["email"][0] == "sent"
    assert (await deliveries(services, elsewhere.notification_id))["email"][0] == "sent"

    # null removes the default.
    await data(await owner_client.put(url, json={**body, "enabled": None}))
    assert await data(await owner_client.get(url)) == []


async def test_another_account_and_bad_input(
    services: Notifications, factory: Factory, make_client: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    other = await factory.user(password=None)
    client = await signed_in(make_client, factory, owner, owner.account_id)
    await error(await client.get(f"/api/v1/accounts/{other.account_id}/notification-defaults"), 403)
    url = f"/api/v1/accounts/{owner.account_id}/notification-defaults"
    bad = {"eventType": "report.ready", "channel": "sse", "enabled": False}
    await error(await client.put(url, json=bad), 422)
    await error(
        await client.put(url, json={"eventType": "nope.x", "channel": "email", "enabled": True}),
        422,
    )
