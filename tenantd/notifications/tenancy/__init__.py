"""Notifications tenantd sends by itself about its own tenancy changes (an invitation to you,
someone joined your account, a request to join it, your role changed).

They are ordinary event definitions of the engine (same registry, preferences, dedup, self-action
guard, channels), registered before the application's own TENANTD_EVENT_MODULES when
TENANTD_BUILTIN_NOTIFICATIONS is on, and fed from the outbox events of those changes (see
`feed`), so a change and its notification commit together or not at all.
"""

from __future__ import annotations

from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import Settings

MODULE = "tenantd.notifications.tenancy.events"
SETTING = "TENANTD_BUILTIN_NOTIFICATIONS"


def enabled(settings: Settings) -> bool:
    """Off unless asked for: the service ships no event types of its own by default
    (SERVICE.md); `scripts/run` turns them on for the hosted pages."""
    return settings.section(NotificationSettings).builtin_notifications


def event_modules(settings: Settings) -> tuple[str, ...]:
    """Every event module to load: the built-in one first (when on), then the application's."""
    return ((MODULE,) if enabled(settings) else ()) + tuple(
        settings.section(NotificationSettings).event_modules
    )
