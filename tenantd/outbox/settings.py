"""The outbox's settings section."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator

from tenantd.settings import Positive, Section, at_least, env


class OutboxSettings(Section):
    """Every change an application cares about (user.created, membership.revoked, ...) is
    written to the outbox in the transaction of the change."""

    title: ClassVar[str] = "Outbox and events API"

    events_retention_days: Positive = env(
        "TENANTD_EVENTS_RETENTION_DAYS",
        "Events are kept this many days (the `events` sweep, hourly) for GET /api/v1/events"
        " and `tenantd webhooks replay`.",
        default=30,
    )
    outbox_poll_seconds: Annotated[float, BeforeValidator(at_least(0.005))] = env(
        "TENANTD_OUTBOX_POLL_SECONDS",
        "How often (seconds) each `tenantd serve` looks for newly committed events to number"
        " and fan out to webhook endpoints (one instance at a time does it).",
        default=0.1,
    )
