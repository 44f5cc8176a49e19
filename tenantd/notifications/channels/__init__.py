"""Delivery channels: in_app, email, sse, web_push."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tenantd.db import Row
from tenantd.jobs.kinds import JobInfo
from tenantd.notifications import queries

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications


Deliver = Callable[["Notifications", uuid.UUID, Row], Awaitable[None]]
DeliveryJob = Callable[["Notifications", dict[str, Any], JobInfo], Awaitable[None]]


def delivery_job(channel: str) -> Callable[[Deliver], DeliveryJob]:
    """The job of a channel's delivery, `deliver(services, notification_id, row)`: the job
    reads the notification's delivery context and leaves a settled (or gone) delivery alone,
    so a re-run job sends nothing twice."""

    def wrap(deliver: Deliver) -> DeliveryJob:
        @functools.wraps(deliver)
        async def run(services: Notifications, payload: dict[str, Any], job: JobInfo) -> None:
            notification_id = uuid.UUID(str(payload["notificationId"]))
            async with services.db.connection() as conn:
                row = await queries.delivery_context(
                    conn, notification_id=notification_id, channel=channel
                )
            if row is not None and row["delivery_status"] == "pending":
                await deliver(services, notification_id, row)

        return run

    return wrap


async def settle_delivery(
    services: Notifications,
    notification_id: uuid.UUID,
    channel: str,
    status: str,
    reason: str | None = None,
) -> None:
    """Settle a channel's delivery row (sent, failed or suppressed with a reason)."""
    async with services.db.connection() as conn:
        await queries.settle_delivery(
            conn, notification_id=notification_id, channel=channel, status=status, reason=reason
        )
