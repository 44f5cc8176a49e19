"""What the notification tests share besides fixtures: the fixture event module, waiting for
the job queue to be idle, and a notification's delivery rows."""

from __future__ import annotations

from typing import Any

from tenantd.notifications.domain import Notifications
from tests.helpers import eventually

EVENT_MODULE = "tests.notifications.events_fixture"


async def quiesce(services: Notifications, *, within: float = 30.0) -> None:
    """Wait until no job (durable or inline) is left to run."""

    async def idle() -> bool:
        await services.jobs.drain(within)
        busy = await services.db.fetch_val(
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
        )
        return busy == 0 and services.jobs.pending_inline == 0

    await eventually(idle, within=within)


async def deliveries(services: Notifications, notification_id: Any) -> dict[str, tuple[str, Any]]:
    rows = await services.db.fetch_all(
        "SELECT channel, status, reason FROM notification_deliveries"
        " WHERE notification_id = %(id)s",
        {"id": notification_id},
    )
    return {row["channel"]: (row["status"], row["reason"]) for row in rows}
