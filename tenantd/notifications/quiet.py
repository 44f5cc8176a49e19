"""Quiet hours: a user's window (in their IANA time zone) during which non-critical email and
web push wait; the delivery job is due at the window's end. In-app and SSE are not delayed
(they make no noise). With QUEUES_ENABLED off nothing is delayed (there is no durable queue
to hold the job)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tenantd.email.templates import SUPPORTED_LOCALES
from tenantd.errors import ValidationFailed
from tenantd.identity import queries as identity_queries
from tenantd.notifications import queries
from tenantd.notifications.domain import Notifications

DELAYED_CHANNELS = ("email", "web_push")


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed({"timeZone": "not an IANA time zone name"}) from None


def quiet_delay(
    now: dt.datetime, *, time_zone: str | None, start: dt.time | None, end: dt.time | None
) -> float:
    """Seconds until the quiet hours around `now` end (0 outside them or when unset).

    A window whose start is after its end runs over midnight (22:00-07:00)."""
    if not time_zone or start is None or end is None or start == end:
        return 0.0
    try:
        local = now.astimezone(ZoneInfo(time_zone))
    except (ZoneInfoNotFoundError, ValueError):
        return 0.0
    clock = local.time().replace(tzinfo=None)
    if start < end:
        quiet = start <= clock < end
        end_day = local.date()
    else:
        quiet = clock >= start or clock < end
        end_day = local.date() + dt.timedelta(days=1 if clock >= start else 0)
    if not quiet:
        return 0.0
    ends = dt.datetime.combine(end_day, end, tzinfo=local.tzinfo)
    # In UTC: the same-zone difference of two aware datetimes ignores a DST change between.
    return max((ends.astimezone(dt.UTC) - now.astimezone(dt.UTC)).total_seconds(), 0.0)


def _time(value: str | None, field: str) -> dt.time | None:
    if value is None:
        return None
    try:
        return dt.time.fromisoformat(value)
    except ValueError:
        raise ValidationFailed({field: "HH:MM"}) from None


async def settings_of(services: Notifications, *, user_id: uuid.UUID) -> dict[str, Any]:
    async with services.db.connection() as conn:
        row = await queries.quiet_hours(conn, user_id=user_id)
    row = row or {}
    start, end = row.get("quiet_hours_start"), row.get("quiet_hours_end")
    return {
        "locale": row.get("locale"),
        "timeZone": row.get("time_zone"),
        "quietHoursStart": start.strftime("%H:%M") if start else None,
        "quietHoursEnd": end.strftime("%H:%M") if end else None,
    }


async def set_settings(
    services: Notifications,
    *,
    user_id: uuid.UUID,
    time_zone: str | None,
    start: str | None,
    end: str | None,
    locale: str | None = None,
) -> dict[str, Any]:
    """Set the time zone and quiet hours (both ends, or neither); a locale given replaces
    the user's (emails use it where a translation ships)."""
    if locale is not None and locale not in SUPPORTED_LOCALES:
        raise ValidationFailed({"locale": f"one of {', '.join(SUPPORTED_LOCALES)}"})
    if time_zone is not None:
        zone(time_zone)
    begins, ends = _time(start, "quietHoursStart"), _time(end, "quietHoursEnd")
    if (begins is None) != (ends is None):
        raise ValidationFailed({"quietHoursEnd": "set both ends of the quiet hours, or neither"})
    if begins is not None and time_zone is None:
        raise ValidationFailed({"timeZone": "quiet hours need a time zone"})
    async with services.db.connection() as conn:
        await identity_queries.set_quiet_hours(
            conn, user_id=user_id, time_zone=time_zone, start=begins, end=ends
        )
        if locale is not None:
            await identity_queries.set_locale(conn, user_id=user_id, locale=locale)
    return await settings_of(services, user_id=user_id)
