"""Fan-out: each newly numbered event becomes one delivery (and its job) per enabled
endpoint subscribed to its type, in the sequencer's transaction (so exactly once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenantd.db import Conn, Row
from tenantd.outbox import Consumer
from tenantd.webhooks import queries
from tenantd.webhooks.delivery import WebhookServices, schedule


def wants(event_types: Sequence[str], event_type: str) -> bool:
    """An empty filter takes every type; `account.*` takes a whole noun."""
    if event_type.startswith("webhook."):
        return False  # webhook.test goes to the endpoint it tests only
    if not event_types:
        return True
    for pattern in event_types:
        if pattern == event_type or pattern == "*":
            return True
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
    return False


async def create_deliveries(
    services: WebhookServices,
    conn: Conn,
    events: Sequence[Row],
    endpoints: Sequence[Row],
    *,
    delay: float = 0.0,
) -> int:
    """Deliveries (and their jobs) of `events` to `endpoints`, in event order."""
    columns: dict[str, list[Any]] = {"endpoints": [], "events": [], "seqs": [], "subjects": []}
    for event in events:
        for endpoint in endpoints:
            if wants(endpoint["event_types"], event["type"]):
                columns["endpoints"].append(endpoint["id"])
                columns["events"].append(event["id"])
                columns["seqs"].append(event["seq"])
                columns["subjects"].append(event["subject"])
    if not columns["events"]:
        return 0
    rows = await conn.fetch_all(queries.INSERT_DELIVERIES, columns)
    ids = sorted(row["id"] for row in rows)
    await schedule(services, conn, [(delivery, delay) for delivery in ids])
    return len(ids)


def fan_out(services: WebhookServices) -> Consumer:
    """The relay consumer of this services bundle."""

    async def consume(conn: Conn, events: list[Row]) -> None:
        endpoints = await conn.fetch_all(queries.ENABLED_ENDPOINTS)
        if endpoints:
            await create_deliveries(services, conn, events, endpoints)

    return consume
