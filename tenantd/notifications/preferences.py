"""Preferences per (user, eventType, channel): opt-out of an event's default channels."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.errors import Forbidden, ValidationFailed
from tenantd.identity import permissions
from tenantd.notifications import queries
from tenantd.notifications.domain import Notifications
from tenantd.notifications.registry import localized_text
from tenantd.notifications.service import live_channels
from tenantd.principal import Principal


async def effective_preferences(
    services: Notifications, *, user_id: uuid.UUID, account_id: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    """Every registered event type with its label (in the user's locale where the definition
    gives one per locale), its channels, the caller's effective setting and
    where it comes from: `user` (their own choice), `account` (the active account's default)
    or `default` (on)."""
    registry, settings = services.registry, services.settings
    async with services.db.connection() as conn:
        rows = await queries.preferences(conn, user_id=user_id)
        defaults = await queries.account_defaults(conn, account_id=account_id) if account_id else []
        chosen = await queries.frequencies(conn, user_id=user_id)
        locale = await queries.user_locale(conn, user_id=user_id)
    stored = {(row["event_type"], row["channel"]): row["enabled"] for row in rows}
    by_account = {(row["event_type"], row["channel"]): row["enabled"] for row in defaults}
    frequency = {(row["event_type"], row["channel"]): row["frequency"] for row in chosen}

    def setting(key: tuple[str, str]) -> dict[str, Any]:
        extra = {"frequency": frequency.get(key)}
        if key in stored:
            return {"enabled": stored[key], "source": "user", **extra}
        if key in by_account:
            return {"enabled": by_account[key], "source": "account", **extra}
        return {"enabled": True, "source": "default", **extra}

    return [
        {
            "eventType": event.type,
            "label": localized_text(event.definition.label, locale) or event.type,
            "channels": [
                {"channel": channel, **setting((event.type, channel))}
                for channel in live_channels(settings, event.definition.default_channels)
            ],
        }
        for event in registry.events()
    ]


async def set_preference(
    services: Notifications,
    *,
    user_id: uuid.UUID,
    event_type: str,
    channel: str,
    enabled: bool | None,
    frequency: str | None = None,
) -> dict[str, Any]:
    """Turn one channel of one event type on or off for the user, and/or choose how often it
    comes (instant, hourly, daily: events that declare a digest only)."""
    registry, settings = services.registry, services.settings
    if event_type not in registry:
        raise ValidationFailed({"eventType": "unknown event type"})
    definition = registry.get(event_type).definition
    channels = live_channels(settings, definition.default_channels)
    if channel not in channels:
        raise ValidationFailed({"channel": f"not a channel of {event_type}"})
    if frequency is not None and (definition.digest is None or definition.critical):
        raise ValidationFailed({"frequency": f"{event_type} is not an event with a digest"})
    async with services.db.transaction() as conn:
        if enabled is not None:
            await queries.set_preference(
                conn, user_id=user_id, event_type=event_type, channel=channel, enabled=enabled
            )
        if frequency is not None:
            await queries.set_frequency(
                conn, user_id=user_id, event_type=event_type, channel=channel, frequency=frequency
            )
    return {
        "eventType": event_type,
        "channel": channel,
        "enabled": enabled,
        "frequency": frequency,
    }


def _check_channel(services: Notifications, event_type: str, channel: str) -> None:
    registry, settings = services.registry, services.settings
    if event_type not in registry:
        raise ValidationFailed({"eventType": "unknown event type"})
    channels = live_channels(settings, registry.get(event_type).definition.default_channels)
    if channel not in channels:
        raise ValidationFailed({"channel": f"not a channel of {event_type}"})


def _scoped(actor_account: uuid.UUID | None, account_id: uuid.UUID) -> None:
    """The URL account must be the token's active account (as every account route)."""
    if actor_account != account_id:
        raise Forbidden("This is not your active account; switch to it first")


async def account_defaults(
    services: Notifications,
    *,
    actor_account: uuid.UUID | None,
    account_id: uuid.UUID,
) -> list[dict[str, Any]]:
    """The account's defaults (any member may read them)."""
    _scoped(actor_account, account_id)
    async with services.db.connection() as conn:
        rows = await queries.account_defaults(conn, account_id=account_id)
    return [
        {"eventType": r["event_type"], "channel": r["channel"], "enabled": r["enabled"]}
        for r in rows
    ]


async def set_account_default(
    services: Notifications,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    event_type: str,
    channel: str,
    enabled: bool | None,
) -> dict[str, Any]:
    """`notifications:manage_defaults` (owner, admin): the default of one event type x channel
    for everyone in the account (None removes it); a user's own preference still wins."""
    _scoped(actor.account_id, account_id)
    if not permissions.allowed(
        actor.role, actor.role_permissions, permissions.NOTIFICATIONS_MANAGE_DEFAULTS
    ):
        raise Forbidden(
            "Your role may not set the account's defaults",
            details={"permission": permissions.NOTIFICATIONS_MANAGE_DEFAULTS},
        )
    _check_channel(services, event_type, channel)
    async with services.db.connection() as conn:
        await queries.set_account_default(
            conn, account_id=account_id, event_type=event_type, channel=channel, enabled=enabled
        )
    return {"eventType": event_type, "channel": channel, "enabled": enabled}


async def set_account_defaults(
    services: Notifications,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    choices: dict[tuple[str, str], bool | None],
) -> None:
    """Owner or admin: several defaults at once, (event type, channel) -> on, off or none;
    only those that differ from the account's current ones are written."""
    rows = await account_defaults(services, actor_account=actor.account_id, account_id=account_id)
    current = {(row["eventType"], row["channel"]): row["enabled"] for row in rows}
    for (event_type, channel), enabled in choices.items():
        if enabled == current.get((event_type, channel)):
            continue
        await set_account_default(
            services, actor, account_id, event_type=event_type, channel=channel, enabled=enabled
        )


async def account_defaults_apply(
    services: Notifications, *, user_id: uuid.UUID, account_id: uuid.UUID | None
) -> bool:
    """Whether the active account's defaults decide any of the user's channels (the inbox
    page says so, pointing to the preferences)."""
    if account_id is None:
        return False
    async with services.db.connection() as conn:
        return await queries.account_defaults_apply(conn, user_id=user_id, account_id=account_id)
