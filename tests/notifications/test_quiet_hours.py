"""Quiet hours: in the user's time zone, non-critical email and web push wait until the end
(fixed clocks for the rule; the email job's due time for the wiring)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tenantd.notifications.quiet import quiet_delay
from tests.factories import Factory
from tests.helpers import data, error, eventually
from tests.notifications.support import deliveries

PARIS = "Europe/Paris"


def at(text: str, zone: str = PARIS) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).astimezone(dt.UTC)


@pytest.mark.parametrize(
    ("now", "start", "end", "wait"),
    [
        ("2026-03-10 23:30", "22:00", "07:00", 7.5 * 3600),  # over midnight, before it
        ("2026-03-11 06:00", "22:00", "07:00", 3600),  # over midnight, after it
        ("2026-03-11 07:00", "22:00", "07:00", 0),  # the end itself is not quiet
        ("2026-03-11 12:00", "22:00", "07:00", 0),
        ("2026-03-11 13:15", "13:00", "14:00", 45 * 60),  # same-day window
        ("2026-03-11 14:00", "13:00", "14:00", 0),
        ("2026-03-28 23:00", "22:00", "07:00", 7 * 3600),  # clocks go forward: 7 real hours
    ],
)
def test_quiet_delay_with_a_fixed_clock(now: str, start: str, end: str, wait: float) -> None:
    delay = quiet_delay(
        at(now), time_zone=PARIS, start=dt.time.fromisoformat(start), end=dt.time.fromisoformat(end)
    )
    assert delay == pytest.approx(wait)


def test_the_time_zone_decides() -> None:
    now = at("2026-03-11 23:30")  # 22:30 UTC; 17:30 in New York
    window = {"start": dt.time(22), "end": dt.time(7)}
    assert quiet_delay(now, time_zone=PARIS, **window) > 0
    assert quiet_delay(now, time_zone="America/New_York", **window) == 0
    assert quiet_delay(now, time_zone=None, **window) == 0
    assert quiet_delay(now, time_zone="Not/AZone", **window) == 0


async def signed_in(make_client: Any, factory: Factory, user: Any) -> Any:
    client = await make_client()
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=client.make_url("/")
    )
    return client


@pytest.mark.parametrize("queues_enabled", [True])
async def test_email_waits_until_the_quiet_hours_end(
    services: Notifications, factory: Factory, make_client: Any
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    local = dt.datetime.now(ZoneInfo(PARIS))
    start = (local - dt.timedelta(hours=1)).strftime("%H:%M")
    end = (local + dt.timedelta(hours=2)).strftime("%H:%M")
    saved = await data(
        await client.put(
            "/api/v1/notifications/settings",
            json={"timeZone": PARIS, "quietHoursStart": start, "quietHoursEnd": end},
        )
    )
    assert saved == {
        "locale": None,
        "timeZone": PARIS,
        "quietHoursStart": start,
        "quietHoursEnd": end,
    }
    outcome = await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "Q", "rows": 1}
    )

    async def settled_in_app() -> Any:
        states = await deliveries(services, outcome.notification_id)
        return states.get("in_app") == ("sent", None) and states

    states = await eventually(settled_in_app)
    assert states["email"] == ("pending", None)  # waiting
    wait = await services.db.fetch_val(
        "SELECT extract(epoch FROM run_at - now()) FROM jobs WHERE kind = 'notifications.email'"
    )
    assert 3600 < float(wait) <= 2 * 3600 + 60


async def test_settings_validation(factory: Factory, make_client: Any) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    url = "/api/v1/notifications/settings"
    await error(await client.put(url, json={"timeZone": "Mars/Olympus"}), 422)
    await error(await client.put(url, json={"timeZone": PARIS, "quietHoursStart": "22:00"}), 422)
    await error(await client.put(url, json={"quietHoursStart": "22:00", "quietHoursEnd": "7"}), 422)
    await error(
        await client.put(url, json={"quietHoursStart": "22:00", "quietHoursEnd": "07:00"}), 422
    )
    assert await data(await client.get(url)) == {
        "locale": None,
        "timeZone": None,
        "quietHoursStart": None,
        "quietHoursEnd": None,
    }


async def test_the_locale_is_changeable(factory: Factory, make_client: Any) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    url = "/api/v1/notifications/settings"
    saved = await data(await client.put(url, json={"locale": "fr"}))
    assert saved["locale"] == "fr"
    await error(await client.put(url, json={"locale": "xx"}), 422)
    assert (await data(await client.put(url, json={})))["locale"] == "fr"  # omitted: unchanged
