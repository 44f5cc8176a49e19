"""Endpoint management (the CLI and the webhooks:manage routes call these): add, list,
remove, rotate the secret, enable, send a test event, list deliveries, replay."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2.errors

from tenantd.db import Database, Row
from tenantd.errors import NotFound, ValidationFailed
from tenantd.outbox import Actor, emit
from tenantd.outbox import queries as outbox_queries
from tenantd.settings import Settings
from tenantd.webhooks import queries, sealing
from tenantd.webhooks.addresses import ForbiddenAddress, check_url, refuse_private
from tenantd.webhooks.delivery import schedule
from tenantd.webhooks.domain import Webhooks
from tenantd.webhooks.fanout import create_deliveries

ROTATION_OVERLAP_SECONDS = 24 * 3600  # the old secret keeps signing this long
TEST_EVENT = "webhook.test"


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _types(events: Sequence[str] | None) -> list[str]:
    types = sorted({item.strip() for item in events or () if item.strip()})
    for item in types:
        if not all(
            part and (part.replace("_", "").isalnum() or part == "*") for part in item.split(".")
        ):
            raise ValidationFailed({"events": f"not an event type: {item!r}"})
    return types


def _url(settings: Settings, url: str) -> str:
    try:
        return check_url(url.strip(), refuse_private=refuse_private(settings))
    except ForbiddenAddress as error:
        raise ValidationFailed({"url": str(error)}) from None
    except ValueError as error:
        raise ValidationFailed({"url": str(error)}) from None


@dataclass(frozen=True)
class Created:
    endpoint: Row
    secret: str


async def add_endpoint(
    services: Webhooks,
    *,
    url: str,
    events: Sequence[str] | None = None,
    description: str = "",
) -> Created:
    """A new endpoint with a fresh `whsec_` secret (shown once here, stored sealed)."""
    secret = new_secret()
    endpoint_id = uuid.uuid4()  # the sealed secret is bound to it
    row = await services.db.fetch_one(
        queries.INSERT_ENDPOINT,
        {
            "id": endpoint_id,
            "url": _url(services.settings, url),
            "description": description,
            "types": _types(events),
            "sealed": sealing.seal(services.settings, endpoint_id, secret),
        },
    )
    assert row is not None
    return Created(row, secret)


async def list_endpoints(services: Webhooks) -> list[Row]:
    return await services.db.fetch_all(queries.LIST_ENDPOINTS)


async def get_endpoint(services: Webhooks, endpoint_id: uuid.UUID) -> Row:
    row = await services.db.fetch_one(queries.GET_ENDPOINT, {"id": endpoint_id})
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return row


REMOVE_ATTEMPTS = 3


async def remove_endpoint(services: Webhooks, endpoint_id: uuid.UUID) -> None:
    """Delete the endpoint and its deliveries (pending ones are never sent).

    Deliveries first, as a settling delivery job locks them (deliveries, then the endpoint).
    Two deliveries can still be locked in opposite orders by the two statements; PostgreSQL
    then ends one side, and a removal that lost is simply run again (the job retries too)."""
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            async with services.db.transaction() as conn:
                await conn.execute(queries.DELETE_ENDPOINT_DELIVERIES, {"id": endpoint_id})
                if not await conn.execute(queries.DELETE_ENDPOINT, {"id": endpoint_id}):
                    raise NotFound(f"no webhook endpoint {endpoint_id}")
            return
        except psycopg2.errors.DeadlockDetected:
            if attempt == REMOVE_ATTEMPTS - 1:
                raise


async def rotate_secret(
    services: Webhooks, endpoint_id: uuid.UUID, *, now: bool = False
) -> Created:
    """A new secret; the old one keeps signing alongside it for 24 hours, or (`now`: it
    leaked) ends at once, and any earlier one still in its overlap with it."""
    settings = services.settings
    secret = new_secret()
    async with services.db.transaction() as conn:
        locked = await conn.fetch_one(queries.LOCK_ENDPOINT_SECRET, {"id": endpoint_id})
        if locked is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        previous = None
        if not now:
            old = sealing.current_secret(settings, locked, endpoint_id)
            previous = sealing.seal(settings, endpoint_id, old)
        row = await conn.fetch_one(
            queries.ROTATE_SECRET,
            {
                "id": endpoint_id,
                "sealed": sealing.seal(settings, endpoint_id, secret),
                "previous": previous,
                "overlap": ROTATION_OVERLAP_SECONDS,
            },
        )
    assert row is not None
    return Created(row, secret)


async def enable_endpoint(services: Webhooks, endpoint_id: uuid.UUID) -> Row:
    """Turn a disabled endpoint back on (new events only; `replay` sends the missed ones)."""
    row = await services.db.fetch_one(queries.ENABLE_ENDPOINT, {"id": endpoint_id})
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return row


async def send_test(services: Webhooks, endpoint_id: uuid.UUID, *, actor: Actor) -> str:
    """Queue a `webhook.test` event to this endpoint only; return the event id."""
    async with services.db.transaction() as conn:
        endpoint = await conn.fetch_one(queries.GET_ENDPOINT, {"id": endpoint_id})
        if endpoint is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        subject = f"webhook_endpoint:{endpoint_id}:{uuid.uuid4().hex}"
        event_id = await emit(
            conn,
            TEST_EVENT,
            account_id=None,
            actor=actor,
            data={"endpointId": str(endpoint_id), "message": "This is a test event."},
            subject=subject,
        )
        event = await conn.fetch_one(queries.EVENT_ROW, {"event_id": event_id})
        assert event is not None
        delivery = await conn.fetch_val(
            queries.INSERT_TEST_DELIVERY,
            {"endpoint": endpoint_id, "event_row": event["id"], "subject": subject},
        )
        await schedule(services, conn, [(delivery, 0.0)])
    return event_id


async def list_deliveries(
    services: Webhooks, endpoint_id: uuid.UUID, *, failed: bool = False, limit: int = 100
) -> list[Row]:
    await get_endpoint(services, endpoint_id)
    return await services.db.fetch_all(
        queries.LIST_DELIVERIES, {"endpoint": endpoint_id, "failed": failed, "limit": limit}
    )


async def replay(services: Webhooks, endpoint_id: uuid.UUID, *, since: dt.datetime) -> int:
    """Deliver again every retained event since `since` that the endpoint subscribes to."""
    async with services.db.transaction() as conn:
        endpoint = await conn.fetch_one(queries.LOCK_ENDPOINT, {"id": endpoint_id})
        if endpoint is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        events = await conn.fetch_all(outbox_queries.EVENTS_SINCE, {"since": since})
        return await create_deliveries(services, conn, events, [endpoint])


async def endpoint_status(services: Webhooks) -> list[Row]:
    """Per endpoint: enabled or disabled, backlog, retrying and failed deliveries."""
    return await services.db.fetch_all(queries.STATUS)


async def status_report(db: Database) -> dict[str, Any]:
    """What `tenantd status` shows: each endpoint's state, backlog and failures, and the
    events not yet numbered by a relay."""
    async with db.connection() as conn:
        rows = await conn.fetch_all(queries.STATUS)
        unsequenced = await conn.fetch_val(outbox_queries.BACKLOG)
    return {
        "outboxBacklog": unsequenced,
        "endpoints": [
            {
                "id": str(row["id"]),
                "url": row["url"],
                "enabled": row["disabled_at"] is None,
                "disabledAt": row["disabled_at"],
                "failingSince": row["failing_since"],
                "backlog": row["backlog"],
                "retrying": row["retrying"],
                "failed": row["failed"],
            }
            for row in rows
        ],
    }
