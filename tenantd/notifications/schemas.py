"""Request bodies and answers of the notifications API, and the wire envelope of a notification."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

import orjson
from pydantic import Field

from tenantd.db import Row
from tenantd.web.schemas import ApiModel, RequestBody

Channel = Literal["in_app", "email", "sse", "web_push"]


class Notification(ApiModel):
    id: uuid.UUID
    event_type: str
    title: str
    body: str
    cta_url: str
    cta_label: str
    status: str
    read_at: dt.datetime | None
    created_at: dt.datetime


class NotificationPage(ApiModel):
    items: list[Notification]
    next_cursor: str | None


class UnreadCount(ApiModel):
    count: int


class ReadAll(ApiModel):
    updated: int


class ListQuery(ApiModel):
    status: Literal["unread", "read", "all"] = "all"
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=200)


class ChannelSetting(ApiModel):
    channel: Channel
    enabled: bool


class EventPreferences(ApiModel):
    event_type: str
    channels: list[ChannelSetting]


class PreferenceBody(RequestBody):
    event_type: str = Field(min_length=1, max_length=200)
    channel: Channel
    enabled: bool


class Preference(ApiModel):
    event_type: str
    channel: Channel
    enabled: bool


class Unsubscribed(ApiModel):
    event_type: str
    channel: Channel
    enabled: bool


class PushKeys(RequestBody):
    p256dh: str = Field(min_length=1, max_length=200)
    auth: str = Field(min_length=1, max_length=100)


class PushSubscribeBody(RequestBody):
    """The browser's PushSubscription.toJSON()."""

    endpoint: str = Field(min_length=1, max_length=2048)
    expiration_time: float | None = None
    keys: PushKeys


class PushUnsubscribeBody(RequestBody):
    endpoint: str = Field(min_length=1, max_length=2048)
    expiration_time: float | None = None
    keys: PushKeys | None = None


class PushSubscription(ApiModel):
    id: uuid.UUID
    endpoint: str
    user_agent: str | None
    expires_at: dt.datetime | None
    created_at: dt.datetime
    last_used_at: dt.datetime | None


class Removed(ApiModel):
    removed: bool


class VapidPublicKey(ApiModel):
    public_key: str


def notification_json(row: Row) -> dict[str, Any]:
    """The SERVICE.md notification object."""
    return {
        "id": row["id"],
        "eventType": row["event_type"],
        "title": row["title"],
        "body": row["body"],
        "ctaUrl": row["cta_url"],
        "ctaLabel": row["cta_label"],
        "status": row["status"],
        "readAt": row["read_at"],
        "createdAt": row["created_at"],
    }


def subscription_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "endpoint": row["endpoint"],
        "userAgent": row["user_agent"],
        "expiresAt": row["expires_at"],
        "createdAt": row["created_at"],
        "lastUsedAt": row["last_used_at"],
    }


def envelope(row: Row) -> bytes:
    """The SSE frame data and the web push plaintext: {type, notification}."""
    return orjson.dumps(
        {"type": "notification.created", "notification": notification_json(row)},
        option=orjson.OPT_UTC_Z,
    )
