"""What the notifications domain shows on /metrics: its delivery rows, counted on write by
triggers (sql/0094) and read by the kernel's metrics task."""

from __future__ import annotations

from tenantd.notifications.registry import CHANNELS
from tenantd.ops.metrics import CountedGauge

DELIVERY_STATUSES = ("pending", "sent", "failed", "suppressed")

DELIVERIES = CountedGauge(
    family="deliveries",
    name="tenantd_notification_deliveries",
    help="Notification delivery rows by channel and status",
    labels=("channel", "status"),
    always=tuple((channel, status) for channel in CHANNELS for status in DELIVERY_STATUSES),
)

GAUGES = (DELIVERIES,)
