"""Fan-out: each newly numbered event becomes one delivery per enabled endpoint subscribed to
its type, in the sequencer's transaction (so exactly once), and a job per batch of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenantd.db import Conn, Row
from tenantd.outbox import Consumer
from tenantd.webhooks import queries
from tenantd.webhooks.delivery import DELIVERIES_PER_JOB, enqueue_deliveries
from tenantd.webhooks.domain import Webhooks


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
    services: Webhooks,
    conn: Conn,
    events: Sequence[Row],
    endpoints: Sequence[Row],
    *,
    delay: float = 0.0,
) -> int:
    """Deliveries of `events` to `endpoints` and their jobs (each job: up to
    DELIVERIES_PER_JOB deliveries of one endpoint, in event order)."""
    wanted: dict[Any, list[Row]] = {endpoint["id"]: [] for endpoint in endpoints}
    for event in events:
        for endpoint in endpoints:
            if wants(endpoint["event_types"], event["type"]):
                wanted[endpoint["id"]].append(event)
    count = sum(len(rows) for rows in wanted.values())
    if not count:
        return 0
    ids = sorted(
        row["id"] for row in await conn.fetch_all(queries.ALLOCATE_DELIVERY_IDS, {"n": count})
    )
    columns: dict[str, list[Any]] = {
        "ids": ids,
        "endpoints": [],
        "events": [],
        "seqs": [],
        "subjects": [],
    }
    batches: list[list[int]] = []
    for endpoint_id, endpoint_events in wanted.items():
        for start in range(0, len(endpoint_events), DELIVERIES_PER_JOB):
            chunk = endpoint_events[start : start + DELIVERIES_PER_JOB]
            first = len(columns["events"])
            batches.append(ids[first : first + len(chunk)])
            for event in chunk:
                columns["endpoints"].append(endpoint_id)
                columns["events"].append(event["id"])
                columns["seqs"].append(event["seq"])
                columns["subjects"].append(event["subject"])
    jobs = await enqueue_deliveries(services, conn, batches, [delay] * len(batches))
    columns["jobs"] = [job for job, batch in zip(jobs, batches, strict=True) for _ in batch]
    await conn.execute(queries.INSERT_DELIVERIES, columns)
    return count


def fan_out(services: Webhooks) -> Consumer:
    """The relay consumer of this services bundle."""

    async def consume(conn: Conn, events: list[Row]) -> None:
        endpoints = await conn.fetch_all(queries.ENABLED_ENDPOINTS)
        if endpoints:
            await create_deliveries(services, conn, events, endpoints)

    return consume
