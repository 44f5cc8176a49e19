"""Notifications over HTTP for any backend (issue 15): the event types a key may send, and
send / send-batch with an API key holding `notifications:send`.

The same rules as the Python `send` (`send_many` is its batch form): validation against the
event's pydantic model, then dispatch's self-action guard, dedup, preferences and channels.
A request is one transaction: its idempotency claim, the dispatch jobs (or, queues off, the
notifications), the audit row naming the key, and the answer kept for a retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tenantd.apikeys.principal import ActingKey
from tenantd.audit.keys import record_key_action
from tenantd.notifications.domain import Notifications
from tenantd.notifications.registry import RegisteredEvent
from tenantd.notifications.service import SendOutcome, SendRequest, live_channels, send_many
from tenantd.settings import Settings
from tenantd.web import idempotency


def event_types(services: Notifications) -> orjson.Fragment:
    """Every registered event type (Python, catalog file and stored alike): its label, default
    channels, those live in this configuration, and the JSON Schema of its payload, as JSON.
    Serialised once per registry change (the registry's version says when)."""
    registry = services.registry
    version = registry.version
    kept = services.event_types_answer
    if kept is not None and kept[0] == version:
        return kept[1]
    listed = [event_type_json(event, services.settings) for event in registry.events()]
    encoded = orjson.Fragment(orjson.dumps(listed))
    services.event_types_answer = (version, encoded)
    return encoded


def event_type_json(event: RegisteredEvent, settings: Settings) -> dict[str, Any]:
    """One event type as the event-types routes answer it; a declarative one also gives its
    definition as stored (`definition`) and, when stored over HTTP, its `version`."""
    definition = event.definition
    item: dict[str, Any] = {
        "type": event.type,
        "label": definition.label if definition.label is not None else event.type,
        "description": definition.description,
        "source": "api" if event.stored else "catalog" if event.declared else "python",
        "defaultChannels": list(definition.default_channels),
        "channels": list(live_channels(settings, definition.default_channels)),
        "payloadSchema": definition.schema.model_json_schema(),
        "critical": definition.critical,
    }
    if event.declared is not None:
        item["definition"] = event.declared
    if event.version is not None:
        item["version"] = event.version
    return item


@dataclass(frozen=True)
class Accepted:
    data: dict[str, Any]  # the answer (JSON-ready)
    replayed: bool  # the first answer to this Idempotency-Key, given again


def _outcome(outcome: SendOutcome) -> dict[str, Any]:
    notification_id = outcome.notification_id
    return {"id": str(notification_id) if notification_id else None, "status": outcome.status}


async def accept(
    services: Notifications,
    key: ActingKey,
    requests: Sequence[SendRequest],
    *,
    batch: bool = False,
    idempotency_key: str | None = None,
    request_hash: bytes = b"",
) -> Accepted:
    """Send `requests` for `key` (all or none), once per Idempotency-Key (POST /send, or
    /send-batch when `batch`: each route keeps its own keys)."""
    route = "send-batch" if batch else "send"
    async with services.db.transaction() as conn:
        if idempotency_key is not None:
            first = await idempotency.claim(
                conn,
                key_id=key.id,
                route=route,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
            )
            if first is not None:
                return Accepted(data=first, replayed=True)
        outcomes = await send_many(
            services,
            requests,
            conn=conn,
            field_prefix=(lambda i: f"items.{i}.") if batch else (lambda _i: ""),
        )
        items = [_outcome(outcome) for outcome in outcomes]
        ids = [item["id"] for item in items if item["id"] is not None]
        data: dict[str, Any] = {"ids": ids, "items": items} if batch else items[0]
        await record_key_action(
            conn,
            key,
            action="notifications.sent",
            target=ids[0] if not batch and ids else None,
            data={
                "count": len(ids),
                "types": sorted({r.event_type for r in requests}),
                "idempotencyKey": idempotency_key,
            },
        )
        if idempotency_key is not None:
            await idempotency.remember(
                conn, key_id=key.id, route=route, idempotency_key=idempotency_key, response=data
            )
    services.jobs.wake()  # the dispatch jobs are committed now
    return Accepted(data=data, replayed=False)
