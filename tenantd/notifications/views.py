"""Notification routes: inbox, preferences, SSE stream, web push subscriptions, unsubscribe."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from pydantic import Field

from tenantd.identity.account_call import in_account_of
from tenantd.notifications import preferences as prefs
from tenantd.notifications import quiet
from tenantd.notifications import unsubscribe as unsub
from tenantd.notifications.channels import in_app
from tenantd.notifications.channels.sse.endpoint import stream_notifications
from tenantd.notifications.channels.web_push import subscriptions as push
from tenantd.notifications.channels.web_push.vapid import public_key
from tenantd.notifications.domain import notifications_of
from tenantd.notifications.schemas import (
    AccountDefault,
    AccountDefaultBody,
    EventPreferences,
    ListQuery,
    NotificationPage,
    NotificationSettings,
    NotificationSettingsBody,
    Preference,
    PreferenceBody,
    PushSubscribeBody,
    PushSubscription,
    PushUnsubscribeBody,
    ReadAll,
    Removed,
    UnreadCount,
    Unsubscribed,
    VapidPublicKey,
)
from tenantd.notifications.schemas import Notification as NotificationOut
from tenantd.principal import current_principal
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import ApiModel
from tenantd.web.spec import Access, Routes

ROUTES = Routes("notifications")

BASE = "/api/v1/notifications"


class TokenQuery(ApiModel):
    token: str = Field(min_length=1, max_length=4000)


@ROUTES.get(BASE, response=NotificationPage, summary="List notifications")
async def list_notifications(request: web.Request, query: ListQuery) -> Any:
    principal = current_principal(request)
    return await in_app.inbox_page(
        notifications_of(request.app),
        user_id=principal.user_id,
        status=query.status,
        limit=query.limit,
        cursor=query.cursor,
    )


@ROUTES.get(f"{BASE}/unread-count", response=UnreadCount, summary="Count unread notifications")
async def unread_count(request: web.Request) -> orjson.Fragment:
    principal = current_principal(request)
    count = await in_app.cached_unread_count(
        notifications_of(request.app), user_id=principal.user_id
    )
    # UnreadCount's JSON, written directly (a hot route: no model to build and dump)
    return orjson.Fragment(b'{"count":%d}' % count["count"])


@ROUTES.post(f"{BASE}/{{id}}/read", summary="Mark one notification read")
async def mark_read(request: web.Request) -> NotificationOut:
    notification = await in_app.mark_read(
        notifications_of(request.app),
        user_id=current_principal(request).user_id,
        notification_id=path_uuid(request, "id"),
    )
    return NotificationOut.model_validate(notification)


@ROUTES.post(f"{BASE}/read-all", summary="Mark every notification read")
async def mark_all_read(request: web.Request) -> ReadAll:
    updated = await in_app.mark_all_read(
        notifications_of(request.app), user_id=current_principal(request).user_id
    )
    return ReadAll.model_validate(updated)


@ROUTES.get(
    f"{BASE}/preferences",
    summary="Every event type with its channels and the caller's setting",
)
async def get_preferences(request: web.Request) -> list[EventPreferences]:
    principal = current_principal(request)
    events = await prefs.effective_preferences(
        notifications_of(request.app),
        user_id=principal.user_id,
        account_id=principal.account_id,
    )
    return [EventPreferences.model_validate(event) for event in events]


@ROUTES.put(
    f"{BASE}/preferences",
    summary="Turn one channel of one event type on or off, and/or set its frequency "
    "(instant, hourly, daily: events with a digest)",
)
async def put_preference(request: web.Request, body: PreferenceBody) -> Preference:
    preference = await prefs.set_preference(
        notifications_of(request.app),
        user_id=current_principal(request).user_id,
        event_type=body.event_type,
        channel=body.channel,
        enabled=body.enabled,
        frequency=body.frequency,
    )
    return Preference.model_validate(preference)


@ROUTES.get(
    f"{BASE}/stream",
    wrapped=False,
    produces="text/event-stream",
    responses={
        404: "The SSE switch is off",
        503: "This instance holds its maximum of streams (Retry-After)",
    },
    summary="Server-sent events: notification.created",
)
async def stream(request: web.Request) -> web.StreamResponse:
    return await stream_notifications(request, current_principal(request))


@ROUTES.get(
    f"{BASE}/push/vapid-public-key",
    responses={404: "Web push is off"},
    summary="The VAPID applicationServerKey",
)
async def vapid_public_key(request: web.Request) -> VapidPublicKey:
    current_principal(request)
    return VapidPublicKey.model_validate(public_key(notifications_of(request.app).settings))


@ROUTES.post(
    f"{BASE}/push/subscribe",
    responses={404: "Web push is off"},
    summary="Store the browser's push subscription (upsert; keys rotate)",
)
async def push_subscribe(request: web.Request, body: PushSubscribeBody) -> PushSubscription:
    subscription = await push.subscribe(
        notifications_of(request.app),
        user_id=current_principal(request).user_id,
        endpoint=body.endpoint,
        p256dh=body.keys.p256dh,
        auth=body.keys.auth,
        expiration_ms=body.expiration_time,
        user_agent=request.headers.get("User-Agent"),
    )
    return PushSubscription.model_validate(subscription)


@ROUTES.delete(
    f"{BASE}/push/subscribe",
    responses={404: "Web push is off"},
    summary="Remove a push subscription by endpoint",
)
async def push_unsubscribe(request: web.Request, body: PushUnsubscribeBody) -> Removed:
    removed = await push.unsubscribe(
        notifications_of(request.app),
        user_id=current_principal(request).user_id,
        endpoint=body.endpoint,
    )
    return Removed.model_validate(removed)


@ROUTES.get(
    f"{BASE}/push/subscriptions",
    responses={404: "Web push is off"},
    summary="The caller's push subscriptions",
)
async def push_subscriptions(request: web.Request) -> list[PushSubscription]:
    rows = await push.subscriptions(
        notifications_of(request.app), user_id=current_principal(request).user_id
    )
    return [PushSubscription.model_validate(row) for row in rows]


@ROUTES.get(
    f"{BASE}/unsubscribe",
    access=Access.PUBLIC,
    wrapped=False,
    produces="text/html",
    summary="Confirmation page of an email unsubscribe link (changes nothing)",
)
async def unsubscribe_page(request: web.Request, query: TokenQuery) -> web.Response:
    settings = notifications_of(request.app).settings
    page = unsub.confirmation_page(settings.secret_key, query.token)
    return web.Response(text=page, content_type="text/html")


@ROUTES.post(
    f"{BASE}/unsubscribe",
    access=Access.PUBLIC,
    summary="One-click unsubscribe (RFC 8058): turn off this event type's emails",
)
async def unsubscribe(request: web.Request, query: TokenQuery) -> Unsubscribed:
    services = notifications_of(request.app)
    claims = await unsub.unsubscribe(
        services.db, secret_key=services.settings.secret_key, token=query.token
    )
    return Unsubscribed(event_type=claims.event_type, channel="email", enabled=False)


ACCOUNT_DEFAULTS = "/api/v1/accounts/{id}/notification-defaults"


@ROUTES.get(ACCOUNT_DEFAULTS, summary="The account's notification defaults (event type x channel)")
async def get_account_defaults(request: web.Request) -> list[AccountDefault]:
    rows = await prefs.account_defaults(
        notifications_of(request.app),
        actor_account=current_principal(request).account_id,
        account_id=path_uuid(request, "id"),
    )
    return [AccountDefault.model_validate(row) for row in rows]


@ROUTES.put(
    ACCOUNT_DEFAULTS,
    summary="Owner or admin: default of one event type x channel for everyone in the account",
)
async def put_account_default(request: web.Request, body: AccountDefaultBody) -> AccountDefault:
    row = await in_account_of(
        notifications_of(request.app),
        request,
        prefs.set_account_default,
        event_type=body.event_type,
        channel=body.channel,
        enabled=body.enabled,
    )
    return AccountDefault.model_validate(row)


@ROUTES.get(f"{BASE}/settings", summary="My time zone and quiet hours")
async def get_notification_settings(request: web.Request) -> NotificationSettings:
    found = await quiet.settings_of(
        notifications_of(request.app), user_id=current_principal(request).user_id
    )
    return NotificationSettings.model_validate(found)


@ROUTES.put(
    f"{BASE}/settings",
    summary="Set my time zone and quiet hours (non-critical email and push wait until they end)",
)
async def put_notification_settings(
    request: web.Request, body: NotificationSettingsBody
) -> NotificationSettings:
    saved = await quiet.set_settings(
        notifications_of(request.app),
        user_id=current_principal(request).user_id,
        time_zone=body.time_zone,
        start=body.quiet_hours_start,
        end=body.quiet_hours_end,
        locale=body.locale,
    )
    return NotificationSettings.model_validate(saved)
