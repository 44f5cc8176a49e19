"""Pages of notification settings: per event type x channel on/off and how often (events with
a digest), which setting applies (the user's own choice or the active account's default),
quiet hours and language; and the account's defaults, set by its owner or an admin."""

from __future__ import annotations

import functools
import uuid
import zoneinfo
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from tenantd.email.templates import SUPPORTED_LOCALES
from tenantd.errors import AppError, Forbidden
from tenantd.identity import permissions
from tenantd.notifications import preferences as prefs
from tenantd.notifications import quiet
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.ui.forms import Form, Problem, again_showing, done_notice, field, problem, problem_page
from tenantd.ui.render import redirect
from tenantd.ui.session import Viewer
from tenantd.ui.strings import text
from tenantd.web.routing import path_uuid

PREFERENCES = "/notifications/preferences"
QUIET_HOURS = "/notifications/preferences/quiet-hours"
DEFAULTS = "/accounts/{id}/notification-defaults"
FREQUENCIES = ("instant", "hourly", "daily")
MANAGE_DEFAULTS = permissions.NOTIFICATIONS_MANAGE_DEFAULTS
# An account default in a form: no default (the channel is on), on, off.
DEFAULT_CHOICES = {"": None, "on": True, "off": False}


@functools.cache
def time_zones() -> tuple[str, ...]:
    """The IANA zone names a user can pick (Area/City and UTC), sorted."""
    names = zoneinfo.available_timezones()
    return tuple(sorted(n for n in names if "/" in n and not n.startswith(("Etc/", "SystemV/"))))


def every(window: float) -> str:
    """A digest window in words: every hour, every day, every 10 minutes."""
    if window == 3600:
        return text("frequency.every_hour")
    if window == 86_400:
        return text("frequency.every_day")
    if window % 3600 == 0:
        return text("frequency.every_hours", count=int(window // 3600))
    return text("frequency.every_minutes", count=max(round(window / 60), 1))


def digest_window(services: Notifications, event_type: str) -> float | None:
    """The event's digest window, or None when a user cannot choose a frequency for it."""
    definition = services.registry.get(event_type).definition
    if definition.digest is None or definition.critical:
        return None
    return float(definition.digest.window_seconds)


def _field_name(prefix: str, event_type: str, channel: str) -> str:
    return f"{prefix}:{event_type}:{channel}"


async def _events(services: Notifications, viewer: Viewer) -> list[dict[str, Any]]:
    """Every event type with its channels' effective settings and, for a digest event, the
    choice of frequency (none stored: the event's own window)."""
    events = await prefs.effective_preferences(
        services, user_id=viewer.principal.user_id, account_id=viewer.principal.account_id
    )
    for event in events:
        window = digest_window(services, event["eventType"])
        event["critical"] = services.registry.get(event["eventType"]).definition.critical
        event["digest"] = window is not None
        event["every"] = every(window) if window is not None else ""
    return events


def _columns(events: list[dict[str, Any]]) -> list[str]:
    channels: list[str] = []
    for event in events:
        for setting in event["channels"]:
            if setting["channel"] not in channels:
                channels.append(setting["channel"])
    return channels


async def _preferences(
    request: web.Request,
    viewer: Viewer,
    *,
    issue: Problem | None = None,
    quiet_values: dict[str, Any] | None = None,
) -> web.Response:
    services = notifications_of(request.app)
    events = await _events(services, viewer)
    account = viewer.account
    return problem_page(
        request,
        "preferences.html",
        text("preferences.title"),
        issue,
        events=events,
        channels=_columns(events),
        frequencies=FREQUENCIES,
        quiet=quiet_values or await quiet.settings_of(services, user_id=viewer.principal.user_id),
        time_zones=time_zones(),
        locales=SUPPORTED_LOCALES,
        account=account,
        manage_defaults=account is not None and viewer.can(MANAGE_DEFAULTS),
        uses_account_defaults=any(
            setting["source"] == "account" for event in events for setting in event["channels"]
        ),
        notice=done_notice(request),
    )


async def preferences_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _preferences(request, viewer)


async def _save_channels(
    services: Notifications, viewer: Viewer, form: MultiDictProxy[Any]
) -> None:
    """Write what changed: a channel turned on or off, a frequency chosen."""
    checked = set(form.getall("on", []))
    for event in await _events(services, viewer):
        for setting in event["channels"]:
            channel = setting["channel"]
            wanted = f"{event['eventType']}:{channel}" in checked
            enabled = wanted if wanted != setting["enabled"] else None
            frequency = None
            if event["digest"]:
                chosen = field(form, _field_name("frequency", event["eventType"], channel))
                if chosen in FREQUENCIES and chosen != setting["frequency"]:
                    frequency = chosen
            if enabled is None and frequency is None:
                continue
            await prefs.set_preference(
                services,
                user_id=viewer.principal.user_id,
                event_type=event["eventType"],
                channel=channel,
                enabled=enabled,
                frequency=frequency,
            )


async def preferences_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    await _save_channels(notifications_of(request.app), viewer, form)
    return redirect(request, PREFERENCES + "?done=preferences")


preferences_again = again_showing(_preferences)


async def quiet_hours_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    posted = _quiet_values(form)
    await quiet.set_settings(
        notifications_of(request.app),
        user_id=viewer.principal.user_id,
        time_zone=posted["timeZone"],
        start=posted["quietHoursStart"],
        end=posted["quietHoursEnd"],
        locale=posted["locale"],
    )
    return redirect(request, PREFERENCES + "?done=quiet_hours#quiet-hours")


def _quiet_values(form: Form) -> dict[str, str | None]:
    names = ("timeZone", "quietHoursStart", "quietHoursEnd", "locale")
    return {name: field(form, name) or None for name in names}


async def quiet_hours_again(
    request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
) -> web.Response:
    """The preferences again, the quiet hours as they were typed."""
    posted = _quiet_values(form) if form is not None else None
    return await _preferences(request, viewer, issue=problem(exc), quiet_values=posted)


# -- the account's defaults ----------------------------------------------------------------------


async def _current_defaults(
    services: Notifications, viewer: Viewer, account_id: uuid.UUID
) -> dict[tuple[str, str], bool]:
    rows = await prefs.account_defaults(
        services, actor_account=viewer.principal.account_id, account_id=account_id
    )
    return {(row["eventType"], row["channel"]): row["enabled"] for row in rows}


async def _defaults(
    request: web.Request, viewer: Viewer, *, issue: Problem | None = None
) -> web.Response:
    services = notifications_of(request.app)
    account_id = path_uuid(request, "id")
    current = await _current_defaults(services, viewer, account_id)
    events = await _events(services, viewer)
    for event in events:
        for setting in event["channels"]:
            setting["default"] = current.get((event["eventType"], setting["channel"]))
    account = viewer.account or {}
    return problem_page(
        request,
        "notification_defaults.html",
        text("defaults.title"),
        issue,
        account_id=account_id,
        account_name=account.get("name", ""),
        events=events,
        channels=_columns(events),
        manage=viewer.can(MANAGE_DEFAULTS),
        notice=done_notice(request),
    )


async def defaults_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _defaults(request, viewer)


async def defaults_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    account_id = path_uuid(request, "id")
    if not viewer.can(MANAGE_DEFAULTS):
        raise Forbidden(text("defaults.managers_only"))
    services = notifications_of(request.app)
    choices = await _posted_defaults(services, viewer, form)
    await prefs.set_account_defaults(services, viewer.principal, account_id, choices=choices)
    return redirect(request, f"/accounts/{account_id}/notification-defaults?done=defaults")


defaults_again = again_showing(_defaults)


async def _posted_defaults(
    services: Notifications, viewer: Viewer, form: MultiDictProxy[Any]
) -> dict[tuple[str, str], bool | None]:
    """The defaults the form chose: a field it did not carry (or no choice of ours) is none."""
    choices: dict[tuple[str, str], bool | None] = {}
    for event in await _events(services, viewer):
        for setting in event["channels"]:
            name = _field_name("default", event["eventType"], setting["channel"])
            if name in form and field(form, name) in DEFAULT_CHOICES:
                choices[(event["eventType"], setting["channel"])] = DEFAULT_CHOICES[
                    field(form, name)
                ]
    return choices
