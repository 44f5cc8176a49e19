"""Notifications over HTTP for any backend (issue 15): the event types a key may send, and
send / send-batch with an API key holding `notifications:send`.

The same rules as the Python `send` (`send_many` is its batch form): validation against the
event's pydantic model, then dispatch's self-action guard, dedup, preferences and channels.
A request is one transaction: its idempotency claim, the dispatch jobs (or, queues off, the
notifications), the audit row naming the key, and the answer kept for a retry.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tenantd.apikeys import idempotency
from tenantd.apikeys.audit import record_key_action
from tenantd.notifications.registry import EventRegistry
from tenantd.notifications.service import SendOutcome, SendRequest, live_channels, send_many
from tenantd.notifications.services import NotificationServices
from tenantd.principal import ActingKey
from tenantd.settings import Settings

_EVENT_TYPES: weakref.WeakKeyDictionary[EventRegistry, tuple[int, Settings, orjson.Fragment]] = (
    weakref.WeakKeyDictionary()
)


def event_types(registry: EventRegistry, settings: Settings) -> orjson.Fragment:
    """Every registered event type: its default channels, those live in this configuration,
    and the JSON Schema of its payload, as JSON. Serialised once per registry and settings:
    the list only changes when an event type is registered (types are never removed), so
    the count of types tells a stale answer apart."""
    count = len(registry)
    kept = _EVENT_TYPES.get(registry)
    if kept is not None and kept[0] == count and kept[1] is settings:
        return kept[2]
    listed = [
        {
            "type": event.type,
            "defaultChannels": list(event.definition.default_channels),
            "channels": list(live_channels(settings, event.definition.default_channels)),
            "payloadSchema": event.definition.schema.model_json_schema(),
        }
        for event in registry.events()
    ]
    encoded = orjson.Fragment(orjson.dumps(listed))
    _EVENT_TYPES[registry] = (count, settings, encoded)
    return encoded


@dataclass(frozen=True)
class Accepted:
    data: dict[str, Any]  # the answer (JSON-ready)
    replayed: bool  # the first answer to this Idempotency-Key, given again


def _outcome(outcome: SendOutcome) -> dict[str, Any]:
    notification_id = outcome.notification_id
    return {"id": str(notification_id) if notification_id else None, "status": outcome.status}


async def accept(
    services: NotificationServices,
    key: ActingKey,
    *,
    route: str,
    requests: Sequence[SendRequest],
    batch: bool,
    idempotency_key: str | None = None,
    request_hash: bytes = b"",
) -> Accepted:
    """Send `requests` for `key` (all or none), once per Idempotency-Key."""
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
