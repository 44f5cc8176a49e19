"""The notifications' settings section."""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from tenantd.settings import (
    SWITCH,
    Flag,
    Interval,
    Names,
    Positive,
    Section,
    Text,
    at_least,
    env,
)

DEFAULT_PUSH_HOSTS = (
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "*.push.apple.com",
    "*.notify.windows.com",
)


class NotificationSettings(Section):
    """Event types, and the sse and web push channels."""

    title: ClassVar[str] = "Notifications"

    event_modules: Names = env(
        "TENANTD_EVENT_MODULES",
        "Notification event definitions: comma list of importable modules, each with a list"
        " EVENTS.",
        default=(),
        json_schema_extra=SWITCH,
    )
    event_catalog: Text | None = env(
        "TENANTD_EVENT_CATALOG",
        "Declarative event types (no Python): a JSON or YAML file, a list of definitions each"
        " with its `type` (docs/event-catalog.md), loaded at start-up; a bad entry fails"
        " start-up. Empty: none.",
        default=None,
    )
    builtin_notifications: Flag = env(
        "TENANTD_BUILTIN_NOTIFICATIONS",
        "true: tenantd's own notification event types (tenantd.invitation.received,"
        " tenantd.member.joined, tenantd.join_request.received, tenantd.member.role_changed),"
        " sent when those tenancy changes commit, listed with TENANTD_EVENT_MODULES' events."
        " Off by default; scripts/run turns it on.",
        default=False,
        json_schema_extra=SWITCH,
    )
    notifications_sse_enabled: Flag = env(
        "NOTIFICATIONS_SSE_ENABLED",
        "true: the sse notification channel and GET /api/v1/notifications/stream (404 while off).",
        default=False,
        json_schema_extra=SWITCH,
    )
    notifications_sse_max_streams_per_user: Positive = env(
        "NOTIFICATIONS_SSE_MAX_STREAMS_PER_USER",
        "SSE stream caps: a user's new stream over the first ends their oldest; over the"
        " second (per process) a new stream gets 503 with Retry-After.",
        default=10,
    )
    notifications_sse_max_streams: Positive = env("NOTIFICATIONS_SSE_MAX_STREAMS", default=10000)
    sse_tick_seconds: Interval = env(
        "TENANTD_SSE_TICK_SECONDS",
        "Server-sent events: idle keep-alive / re-check interval, per-stream buffer (overflow"
        " ends it).",
        default=15.0,
    )
    sse_queue_size: Positive = env("TENANTD_SSE_QUEUE_SIZE", default=100)
    sse_disconnect_check_seconds: Interval = env(
        "TENANTD_SSE_DISCONNECT_CHECK_SECONDS",
        "How often the process looks for SSE clients that closed their connection (their"
        " streams end).",
        default=1.0,
    )
    vapid_public_key: Text | None = env(
        "WEB_PUSH_VAPID_PUBLIC_KEY",
        "Web push: all three set = the web_push channel exists (`tenantd vapid generate`"
        " prints a set).",
        default=None,
    )
    vapid_private_key: Text | None = env("WEB_PUSH_VAPID_PRIVATE_KEY", default=None, repr=False)
    vapid_subject: Text | None = env(
        "WEB_PUSH_VAPID_SUBJECT", default=None, examples=["mailto:ops@example.com"]
    )
    web_push_allowed_hosts: Names = env(
        "WEB_PUSH_ALLOWED_HOSTS",
        "Push endpoints must be https on one of these hosts (http://host:port entries allow"
        " plain http to that host).",
        default=DEFAULT_PUSH_HOSTS,
    )
    web_push_max_subscriptions_per_user: Positive = env(
        "WEB_PUSH_MAX_SUBSCRIPTIONS_PER_USER",
        "Push subscriptions kept per user; a new one over it replaces the user's oldest.",
        default=20,
    )
    web_push_timeout_seconds: Annotated[float, BeforeValidator(at_least(0.01))] = env(
        "TENANTD_WEB_PUSH_TIMEOUT_SECONDS",
        "Web push: timeout of each send to a push service.",
        default=10.0,
    )

    @property
    def web_push_enabled(self) -> bool:
        return bool(self.vapid_public_key and self.vapid_private_key and self.vapid_subject)

    def switches(self) -> dict[str, Any]:
        catalog = self.event_catalog
        return {
            **super().switches(),
            "WEB_PUSH": self.web_push_enabled,
            "TENANTD_EVENT_CATALOG": os.path.abspath(catalog) if catalog else "",
        }
