"""Delivery channels: in_app, email, sse, web_push."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from tenantd.notifications import queries

if TYPE_CHECKING:
    from tenantd.notifications.bundle import NotificationServices


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
