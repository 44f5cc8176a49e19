"""Request bodies and answers of the notifications API, and the wire envelope of a notification."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from tenantd.db import Row
from tenantd.web.schemas import ApiModel, Matches, RequestBody

Channel = Literal["in_app", "email", "sse", "web_push"]

# The formats the server enforces, published in the OpenAPI document as the same patterns.
# Event types are dot-separated names (the registry refuses any other at start-up).
EVENT_TYPE_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
EventType = Annotated[
    str,
    Field(min_length=1, max_length=200),
    Matches(EVENT_TYPE_PATTERN, "must be a dot-separated event type name"),
]
# An opaque cursor is the unpadded base64url the server handed out as nextCursor.
Cursor = Annotated[str, Field(max_length=200), Matches(r"^[A-Za-z0-9_-]+$", "invalid cursor")]
# A push service URL: https (http only for a host listed in WEB_PUSH_ALLOWED_HOSTS), URI
# characters only; the host allow-list itself is checked by the service (422 naming it).
PushEndpoint = Annotated[
    str,
    Field(min_length=1, max_length=2048, json_schema_extra={"format": "uri"}),
    Matches(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+$", "endpoint must be an https URL"),
]
# RFC 8291 keys as browsers give them: base64url (padding tolerated). p256dh is a 65-byte
# uncompressed P-256 point (0x04 first: "B" then A-P), auth a 16-byte secret.
P256dhKey = Annotated[
    str,
    Field(max_length=200),
    Matches(
        r"^B[A-P][A-Za-z0-9_-]{85}=*$", "must be a base64url uncompressed P-256 point (65 bytes)"
    ),
]
AuthKey = Annotated[
    str,
    Field(max_length=100),
    Matches(r"^[A-Za-z0-9_-]{22}=*$", "must be a base64url 16-byte secret"),
]
# PushSubscription.expirationTime: epoch milliseconds or null, never a boolean or a string;
# bounded to what a timestamp can hold (year 9999).
ExpirationTime = Annotated[float, Field(strict=True, ge=0, le=253_402_300_799_999)]

# A real Chrome PushSubscription.toJSON() (keys from RFC 8291's worked example).
PUSH_SUBSCRIPTION_EXAMPLE = {
    "endpoint": (
        "https://fcm.googleapis.com/fcm/send/dpH5lCsTSSM:APA91bHqjZxM0VImWWqDRN7U0a3AycjUf4O"
        "-byuxb_wJsKRaKvV_iKw56s16ekq6FUqoCF7k2nICUpd8fHPxVTgqLunFeVeB9lLCQZyohyAztTH8ZQL9WC"
        "xKpA6dvTG_TUIhQUFq_n"
    ),
    "expirationTime": None,
    "keys": {
        "p256dh": (
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        ),
        "auth": "BTBZMqHH6r4Tts7J_aSIgg",
    },
}


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
    # Frozen: parsed answers are kept per query string (tenantd.web.body.parse_query).
    model_config = ConfigDict(frozen=True)  # merged with ApiModel's

    status: Literal["unread", "read", "all"] = "all"
    limit: int = Field(default=50, ge=1, le=100)
    cursor: Cursor | None = None


Frequency = Literal["instant", "hourly", "daily"]


class WithFrequency(ApiModel):
    """An answer whose `frequency` is left out when unset: events without a digest have
    none, and their preferences read as they always did."""

    frequency: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_frequency(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("frequency") is None:
            data.pop("frequency", None)
        return data


class ChannelSetting(WithFrequency):
    channel: Channel
    enabled: bool
    source: str = Field(
        "default", description="user, account (the active account's default) or default"
    )
    frequency: str | None = Field(
        None,
        description="digest events only: instant, hourly or daily; absent: the event's window",
    )


class EventPreferences(ApiModel):
    event_type: str
    label: str  # the definition's label (in the user's locale), else the type
    channels: list[ChannelSetting]


class ChannelChoice(
    RequestBody,
    json_schema_extra={
        "examples": [{"eventType": "comment.created", "channel": "email", "enabled": False}]
    },
):
    """One channel of one event type turned on or off (a user's preference, an account's
    default)."""

    event_type: EventType
    channel: Channel


class PreferenceBody(ChannelChoice):
    frequency: Frequency | None = None  # an event with a digest only; omitted: unchanged
    # Omitted: unchanged; but one of enabled and frequency is required (the error names
    # `enabled`, the field every client sends).
    enabled: StrictBool | None = Field(None, validate_default=True)

    @field_validator("enabled")
    @classmethod
    def _something(cls, enabled: bool | None, info: ValidationInfo) -> bool | None:
        if enabled is None and info.data.get("frequency") is None:
            raise ValueError("give enabled, frequency or both")
        return enabled


class Preference(WithFrequency):
    event_type: str
    channel: Channel
    enabled: bool | None
    frequency: str | None = None


class Unsubscribed(ApiModel):
    event_type: str
    channel: Channel
    enabled: bool


class PushKeys(RequestBody):
    # The browser's name, not the camelCase alias ("p256Dh") the generator would make.
    p256dh: P256dhKey = Field(alias="p256dh")
    auth: AuthKey


class PushSubscribeBody(RequestBody, json_schema_extra={"examples": [PUSH_SUBSCRIPTION_EXAMPLE]}):
    """The browser's PushSubscription.toJSON()."""

    endpoint: PushEndpoint
    expiration_time: ExpirationTime | None = None
    keys: PushKeys


class PushUnsubscribeBody(
    RequestBody,
    json_schema_extra={
        "examples": [PUSH_SUBSCRIPTION_EXAMPLE, {"endpoint": PUSH_SUBSCRIPTION_EXAMPLE["endpoint"]}]
    },
):
    endpoint: PushEndpoint
    expiration_time: ExpirationTime | None = None
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


class AccountDefaultBody(ChannelChoice):
    enabled: StrictBool | None = Field(description="null removes the account's default")


class AccountDefault(ApiModel):
    event_type: str
    channel: str
    enabled: bool | None


class NotificationSettingsBody(
    RequestBody,
    json_schema_extra={
        "examples": [
            {"timeZone": "Europe/Paris", "quietHoursStart": "22:00", "quietHoursEnd": "07:00"}
        ]
    },
):
    time_zone: str | None = Field(None, max_length=64)
    quiet_hours_start: str | None = Field(None, max_length=8)
    quiet_hours_end: str | None = Field(None, max_length=8)
    locale: str | None = Field(None, max_length=8, description="en or fr; omitted: unchanged")


class NotificationSettings(ApiModel):
    locale: str | None = None
    time_zone: str | None
    quiet_hours_start: str | None
    quiet_hours_end: str | None
