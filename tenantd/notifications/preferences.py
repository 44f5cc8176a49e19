"""Preferences per (user, eventType, channel): opt-out of an event's default channels."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.errors import ValidationFailed
from tenantd.notifications import queries
from tenantd.notifications.service import live_channels
from tenantd.notifications.services import NotificationServices


async def effective_preferences(
    services: NotificationServices, *, user_id: uuid.UUID
) -> list[dict[str, Any]]:
    """Every registered event type with its channels and the caller's effective setting."""
    registry, settings = services.registry, services.settings
    async with services.db.connection() as conn:
        rows = await queries.preferences(conn, user_id=user_id)
    stored = {(row["event_type"], row["channel"]): row["enabled"] for row in rows}
    return [
        {
            "eventType": event.type,
            "channels": [
                {"channel": channel, "enabled": stored.get((event.type, channel), True)}
                for channel in live_channels(settings, event.definition.default_channels)
            ],
        }
        for event in registry.events()
    ]


async def set_preference(
    services: NotificationServices,
    *,
    user_id: uuid.UUID,
    event_type: str,
    channel: str,
    enabled: bool,
) -> dict[str, Any]:
    """Turn one channel of one event type on or off for the user."""
    registry, settings = services.registry, services.settings
    if event_type not in registry:
        raise ValidationFailed({"eventType": "unknown event type"})
    channels = live_channels(settings, registry.get(event_type).definition.default_channels)
    if channel not in channels:
        raise ValidationFailed({"channel": f"not a channel of {event_type}"})
    async with services.db.connection() as conn:
        await queries.set_preference(
            conn, user_id=user_id, event_type=event_type, channel=channel, enabled=enabled
        )
    return {"eventType": event_type, "channel": channel, "enabled": enabled}
