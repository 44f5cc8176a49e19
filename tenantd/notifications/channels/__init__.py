"""Delivery channels: in_app, email, sse, web_push."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.db import Conn, Row
from tenantd.notifications import queries

if TYPE_CHECKING:
    from tenantd.notifications.bundle import NotificationServices


async def pending_delivery(
    conn: Conn, payload: dict[str, Any], channel: str
) -> tuple[uuid.UUID, Row | None]:
    """A delivery job's notification id, and its channel's delivery context while it is still
    pending (None: settled already, or gone; the job has nothing left to do)."""
    notification_id = uuid.UUID(str(payload["notificationId"]))
    row = await queries.delivery_context(conn, notification_id=notification_id, channel=channel)
    if row is None or row["delivery_status"] != "pending":
        return notification_id, None
    return notification_id, row


async def settle_delivery(
    services: NotificationServices,
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
