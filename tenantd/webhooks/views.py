"""Server routes (API key): the events API and webhook endpoint management."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from aiohttp import web

from tenantd.apikeys.principal import acting_key
from tenantd.db import Row
from tenantd.outbox import Actor, public_event, read
from tenantd.web.routing import path_uuid
from tenantd.web.spec import Access, Routes
from tenantd.webhooks import endpoints
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tenantd.webhooks.schemas import (
    DeliveriesQuery,
    EndpointBody,
    EventsQuery,
    ReplayBody,
    RotateQuery,
)

ROUTES = Routes("events")

EVENTS = "/api/v1/events"
ENDPOINTS = "/api/v1/webhook-endpoints"
ENDPOINT = ENDPOINTS + "/{id}"
MANAGE: dict[str, Any] = {"access": Access.API_KEY, "scope": "webhooks:manage"}

P = ParamSpec("P")
T = TypeVar("T")


def endpoint_json(row: Row) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "url": row["url"],
        "description": row["description"],
        "events": list(row["event_types"]),
        "enabled": row["disabled_at"] is None,
        "disabledAt": row["disabled_at"],
        "disabledReason": row["disabled_reason"],
        "failingSince": row["failing_since"],
        "createdAt": row["created_at"],
    }


def delivery_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "eventId": row["event_id"],
        "type": row["type"],
        "status": row["status"],
        "attempts": row["attempts"],
        "nextAttemptAt": row["next_attempt_at"] if row["status"] == "pending" else None,
        "lastAttemptAt": row["last_attempt_at"],
        "lastStatusCode": row["last_status_code"],
        "lastError": row["last_error"],
        "deliveredAt": row["delivered_at"],
    }


def issued_json(created: endpoints.Created) -> dict[str, Any]:
    """An endpoint with its new signing secret (shown once)."""
    return {"endpoint": endpoint_json(created.endpoint), "secret": created.secret}


async def on_endpoint(
    request: web.Request,
    call: Callable[Concatenate[Webhooks, uuid.UUID, P], Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call(services, endpoint id, ...)` for the URL's endpoint (`{id}`)."""
    return await call(webhooks_of(request.app), path_uuid(request, "id"), *args, **kwargs)


@ROUTES.get(
    EVENTS,
    access=Access.API_KEY,
    scope="events:read",
    summary="Events in commit order after a cursor",
)
async def list_events(request: web.Request, query: EventsQuery) -> Any:
    """`{items, nextCursor, hasMore}`; pass nextCursor as `after` to go on (it stays put
    while nothing new happened)."""
    types = [t.strip() for t in (query.types or "").split(",") if t.strip()] or None
    after = int(query.after or 0)
    rows = await webhooks_of(request.app).db.read(
        functools.partial(read, after=after, types=types, limit=query.limit + 1),
        caller=acting_key(request).id,  # a replica shows the key its own writes' events
    )
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    cursor = str(rows[-1]["seq"]) if rows else str(after)
    return {"items": [public_event(row) for row in rows], "nextCursor": cursor, "hasMore": more}


@ROUTES.get(ENDPOINTS, summary="Webhook endpoints", **MANAGE)
async def list_endpoints(request: web.Request) -> Any:
    return [endpoint_json(row) for row in await endpoints.list_endpoints(webhooks_of(request.app))]


@ROUTES.post(ENDPOINTS, status=201, summary="Add a webhook endpoint", **MANAGE)
async def add_endpoint(request: web.Request, body: EndpointBody) -> Any:
    created = await endpoints.add_endpoint(
        webhooks_of(request.app), url=body.url, events=body.events, description=body.description
    )
    return issued_json(created)


@ROUTES.delete(ENDPOINT, summary="Remove a webhook endpoint", **MANAGE)
async def remove_endpoint(request: web.Request) -> Any:
    await on_endpoint(request, endpoints.remove_endpoint)
    return {}


@ROUTES.post(
    f"{ENDPOINT}/rotate-secret",
    summary="Rotate the signing secret: the old one signs 24 more hours, or (?now=true) ends now",
    **MANAGE,
)
async def rotate_secret(request: web.Request, query: RotateQuery) -> Any:
    return issued_json(await on_endpoint(request, endpoints.rotate_secret, now=query.now))


@ROUTES.post(f"{ENDPOINT}/test", summary="Send a webhook.test event", **MANAGE)
async def send_test(request: web.Request) -> Any:
    actor = Actor.api_key(acting_key(request).id)
    return {"eventId": await on_endpoint(request, endpoints.send_test, actor=actor)}


@ROUTES.get(f"{ENDPOINT}/deliveries", summary="Recent deliveries", **MANAGE)
async def list_deliveries(request: web.Request, query: DeliveriesQuery) -> Any:
    rows = await on_endpoint(
        request, endpoints.list_deliveries, failed=query.failed, limit=query.limit
    )
    return [delivery_json(row) for row in rows]


@ROUTES.post(f"{ENDPOINT}/replay", summary="Deliver events again", **MANAGE)
async def replay(request: web.Request, body: ReplayBody) -> Any:
    return {"deliveries": await on_endpoint(request, endpoints.replay, since=body.since)}
