"""Per-user frequency of digest events: PUT /api/v1/notifications/preferences {eventType,
channel, frequency: instant|hourly|daily} routes that channel through a digest of that window
(instant: at once), the other channels keep the event's own digest; refused for events without
a digest."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tests.factories import Factory
from tests.helpers import data, error, eventually
from tests.notifications.support import EVENT_MODULE, deliveries, quiesce

PREFS = "/api/v1/notifications/preferences"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.beyond_events_fixture"
    return env


async def signed_in(make_client: Any, factory: Factory, user: Any) -> Any:
    client = await make_client()
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=client.make_url("/")
    )
    return client


async def dispatched(db: Any) -> None:
    await eventually(
        lambda: db.fetch_val(
            "SELECT count(*) = 0 FROM jobs WHERE kind = 'notifications.dispatch'"
            " AND status IN ('queued', 'running')"
        )
    )


async def test_frequency_is_set_read_and_refused_where_it_has_no_meaning(
    factory: Factory, make_client: Any
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    body = {"eventType": "alert.mailed_digest", "channel": "email", "frequency": "daily"}
    answer = await data(await client.put(PREFS, json=body))
    assert answer["frequency"] == "daily" and answer["enabled"] is None
    listed = {e["eventType"]: e for e in await data(await client.get(PREFS))}
    channels = {c["channel"]: c for c in listed["alert.mailed_digest"]["channels"]}
    assert channels["email"]["frequency"] == "daily"
    assert channels["email"]["enabled"] is True  # frequency alone leaves enabled alone
    assert channels["in_app"].get("frequency") is None
    exported = await data(await client.get("/api/v1/users/me/export"))
    assert [(f["eventType"], f["frequency"]) for f in exported["notificationFrequencies"]] == [
        ("alert.mailed_digest", "daily")
    ]
    for bad, field in [
        ({"eventType": "alert.throttled", "channel": "in_app", "frequency": "hourly"}, "frequency"),
        ({"eventType": "alert.critical", "channel": "in_app", "frequency": "hourly"}, "frequency"),
        ({"eventType": "alert.digest", "channel": "in_app", "frequency": "weekly"}, None),
        ({"eventType": "alert.digest", "channel": "in_app"}, None),
    ]:
        refused = await error(await client.put(PREFS, json=bad), 422, "VALIDATION_ERROR")
        if field:
            assert field in refused["details"]["fields"]


@pytest.mark.parametrize("queues_enabled", [True])
async def test_instant_email_daily_in_app(
    services: Notifications, factory: Factory, make_client: Any
) -> None:
    db = services.db
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    for channel, frequency in (("email", "instant"), ("in_app", "daily")):
        body = {"eventType": "alert.mailed_digest", "channel": channel, "frequency": frequency}
        await data(await client.put(PREFS, json=body))
    for n in range(2):
        # One at a time: two queued dispatches may join the digest in either order.
        await send(
            services, "alert.mailed_digest", recipient_user_id=user.id, payload={"topic": f"t{n}"}
        )
        await dispatched(db)
    # The email went at once, one per send, with no in-app row (the digest job waits a day).
    rows = await db.fetch_all(
        "SELECT id, in_app FROM notifications WHERE user_id = %(u)s", {"u": user.id}
    )
    assert len(rows) == 2
    for row in rows:
        assert not row["in_app"]

        async def mailed(notification_id: Any = row["id"]) -> bool:
            return await deliveries(services, notification_id) == {"email": ("sent", None)}

        await eventually(mailed)
    # The in-app part waits for a daily digest.
    ahead = await db.fetch_val(
        "SELECT run_at - created_at FROM jobs WHERE kind = 'notifications.digest'"
    )
    assert ahead >= dt.timedelta(hours=23, minutes=59)
    await db.execute("UPDATE jobs SET run_at = now() WHERE kind = 'notifications.digest'")
    await quiesce(services)
    digest = await eventually(
        lambda: db.fetch_one(
            "SELECT id, title FROM notifications WHERE user_id = %(u)s AND title LIKE '2 new%%'",
            {"u": user.id},
        )
    )
    assert digest["title"] == "2 new: Mailed t1"
    assert await deliveries(services, digest["id"]) == {"in_app": ("sent", None)}


@pytest.mark.parametrize("queues_enabled", [True])
async def test_hourly_email_next_to_the_events_window(
    services: Notifications, factory: Factory, make_client: Any
) -> None:
    db = services.db
    user = await factory.user(password=None)
    other = await factory.user(password=None)  # no choice: the event's own digest
    client = await signed_in(make_client, factory, user)
    body = {"eventType": "alert.digest", "channel": "in_app", "frequency": "hourly"}
    await data(await client.put(PREFS, json=body))
    body = {"eventType": "alert.mailed_digest", "channel": "email", "frequency": "daily"}
    await data(await client.put(PREFS, json=body))
    await send(services, "alert.mailed_digest", recipient_user_id=user.id, payload={"topic": "a"})
    await send(services, "alert.mailed_digest", recipient_user_id=other.id, payload={"topic": "b"})
    await dispatched(db)
    windows = await db.fetch_all(
        "SELECT d.user_id, d.channels, j.run_at - j.created_at AS ahead"
        " FROM notification_digests d JOIN jobs j ON j.kind = 'notifications.digest'"
        " AND j.payload->>'digestId' = d.id::text ORDER BY d.user_id, ahead"
    )
    mine = sorted(
        ((w["channels"], round(w["ahead"].total_seconds() / 3600)) for w in windows
         if w["user_id"] == user.id),
        key=lambda item: item[1],
    )  # fmt: skip
    assert mine == [(["in_app"], 1), (["email"], 24)]
    theirs = [(w["channels"], round(w["ahead"].total_seconds())) for w in windows
              if w["user_id"] == other.id]  # fmt: skip
    assert theirs == [(None, 3600)]
