"""Server routes of notifications (API key with `notifications:send`): event types, send,
send-batch (each may be scheduled: `deliverAt` / `delaySeconds`), cancel of a scheduled send."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from typing import Annotated, Any

import orjson
from aiohttp import web
from pydantic import Field

from tenantd.apikeys.principal import ActingKey, acting_key
from tenantd.audit.keys import record_key_action
from tenantd.errors import ValidationFailed
from tenantd.notifications import definitions, server
from tenantd.notifications.declared import EventTypeBody
from tenantd.notifications.domain import notifications_of
from tenantd.notifications.schemas import EVENT_TYPE_PATTERN, EventType
from tenantd.notifications.service import SendRequest, cancel_scheduled
from tenantd.web.idempotency import KEY_PATTERN, fingerprint
from tenantd.web.json import ok
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import ApiModel, Matches, Multiline, RequestBody
from tenantd.web.spec import API_BODY_LIMIT, Access, Routes

ROUTES = Routes("notifications (server)")

BASE = "/api/v1/notifications"
SCOPE = "notifications:send"
MANAGE = "notifications:manage"  # declarative event types: define, replace, delete
DEFINITION_BODY_LIMIT = 4 * API_BODY_LIMIT  # a definition carries its email templates
MAX_BATCH = 1000
BATCH_BODY_LIMIT = 16 * API_BODY_LIMIT  # 1,000 items of up to ~16 KiB each
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Who may call: a send (or its cancel) with the send scope; the event types' definitions with
# the manage scope.
SENDER: dict[str, Any] = {"access": Access.API_KEY, "scope": SCOPE}
MANAGER: dict[str, Any] = {"access": Access.API_KEY, "scope": MANAGE}
IDEMPOTENT_RESPONSES = {409: "The Idempotency-Key was used with a different request"}

IdempotencyKey = Annotated[
    str,
    Field(max_length=255),
    Matches(KEY_PATTERN, "1 to 255 printable ASCII characters without spaces"),
]
# Payload text may span lines (a comment's body); other control characters are refused.
Payload = Annotated[dict[str, Any], Multiline()]


class SendItem(RequestBody):
    type: EventType
    recipient_user_id: uuid.UUID
    payload: Payload
    account_id: uuid.UUID | None = None
    # Scheduled send (QUEUES_ENABLED on; at most 366 days ahead; a past time is now).
    deliver_at: dt.datetime | None = None  # RFC 3339 with a UTC offset
    delay_seconds: float | None = None

    @property
    def scheduled(self) -> bool:
        return self.deliver_at is not None or self.delay_seconds is not None

    def request(self, schedule_key: str | None = None) -> SendRequest:
        return SendRequest(
            event_type=self.type,
            recipient_user_id=self.recipient_user_id,
            payload=self.payload,
            account_id=self.account_id,
            deliver_at=self.deliver_at,
            delay_seconds=self.delay_seconds,
            idempotency_key=schedule_key if self.scheduled else None,
        )


class SendBody(SendItem):
    idempotency_key: IdempotencyKey | None = None


class SendBatchBody(RequestBody):
    items: list[SendItem] = Field(min_length=1, max_length=MAX_BATCH)
    idempotency_key: IdempotencyKey | None = None


class SendAccepted(ApiModel):
    id: uuid.UUID | None  # None: dropped at once (duplicate, self-action; queues off only)
    status: str  # queued | scheduled | created | duplicate | self_action


class CancelScheduledBody(RequestBody):
    id: uuid.UUID | None = None
    idempotency_key: IdempotencyKey | None = None  # the Idempotency-Key of a scheduled send


class ScheduledCancelled(ApiModel):
    id: uuid.UUID
    status: str  # cancelled


class BatchAccepted(ApiModel):
    ids: list[uuid.UUID]  # the accepted notifications, in item order
    items: list[SendAccepted]  # one per item, in order


class EventTypeOut(ApiModel):
    type: str
    label: str | dict[str, str]  # the type itself when none is given
    description: str | dict[str, str] | None = None
    source: str  # python | catalog | api (stored over HTTP: PUT / DELETE manage it)
    default_channels: list[str]
    channels: list[str]  # the default channels that exist in this configuration
    payload_schema: dict[str, Any]  # JSON Schema of the payload (from the pydantic model)
    critical: bool
    definition: dict[str, Any] | None = None  # a declarative type's definition as given
    version: int | None = None  # a stored type's version (a new one at every PUT)


class EventTypeDeleted(ApiModel):
    type: str
    status: str  # deleted


def idempotency_key(request: web.Request, field: str | None) -> str | None:
    """The `Idempotency-Key` header or the body's `idempotencyKey` (the same when both)."""
    header = request.headers.get(IDEMPOTENCY_HEADER)
    if header is not None:
        header = header.strip()
        if not header or len(header) > 255 or not header.isascii() or not header.isprintable():
            raise ValidationFailed({IDEMPOTENCY_HEADER: "1 to 255 printable ASCII characters"})
        if " " in header:
            raise ValidationFailed({IDEMPOTENCY_HEADER: "must not contain spaces"})
    if header is not None and field is not None and header != field:
        raise ValidationFailed({"idempotencyKey": "differs from the Idempotency-Key header"})
    return header if header is not None else field


def schedule_key(key: ActingKey, idempotency_key: str) -> str:
    """The name a scheduled send's Idempotency-Key is kept under: scoped to the API key (two
    keys' "reminder-42" are different sends; one key cannot cancel another's by name)."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:48]
    return f"apikey:{key.id}:{digest}"


async def send_once(
    request: web.Request,
    caller: ActingKey,
    body: SendBody | SendBatchBody,
    requests: list[SendRequest],
    key: str | None,
    *,
    batch: bool = False,
) -> web.Response:
    """Send `requests` once per Idempotency-Key `key`: a retry gets the first answer (the
    request's fingerprint is the body's, its key aside), marked as replayed."""
    accepted = await server.accept(
        notifications_of(request.app),
        caller,
        requests,
        batch=batch,
        idempotency_key=key,
        request_hash=fingerprint(body.model_dump(mode="json", exclude={"idempotency_key"})),
    )
    response = ok(accepted.data, status=202)
    if accepted.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response


@ROUTES.get(
    f"{BASE}/event-types",
    access=Access.API_KEY,
    scope=(SCOPE, MANAGE),
    response=list[EventTypeOut],
    summary="Every notification event type (Python, catalog file, stored): label, default "
    "channels and payload JSON Schema",
)
async def event_types(request: web.Request) -> orjson.Fragment:
    return server.event_types(notifications_of(request.app))


@ROUTES.put(
    f"{BASE}/event-types/{{type}}",
    body_limit=DEFINITION_BODY_LIMIT,
    response=EventTypeOut,
    status=201,
    responses={
        200: "Replaced (a new version)",
        409: "CONFLICT: the type is defined by the deployment (Python module or catalog file)",
        422: "VALIDATION_ERROR: a bad JSON Schema, a template that does not compile or "
        "reaches outside the sandbox",
    },
    summary="Define or replace a declarative event type; every instance uses it within 5 s",
    **MANAGER,
)
async def define_event_type(request: web.Request, body: EventTypeBody) -> web.Response:
    services = notifications_of(request.app)
    defined = await definitions.define(
        services, acting_key(request), event_type=_event_type(request), body=body
    )
    item = server.event_type_json(defined.event, services.settings)
    return ok(item, status=201 if defined.created else 200)


@ROUTES.delete(
    f"{BASE}/event-types/{{type}}",
    responses={
        404: "NOT_FOUND: no stored event type of this name",
        409: "CONFLICT: the type is defined by the deployment (Python module or catalog file)",
    },
    summary="Delete a declarative event type stored over HTTP",
    **MANAGER,
)
async def delete_event_type(request: web.Request) -> EventTypeDeleted:
    event_type = _event_type(request)
    services = notifications_of(request.app)
    await definitions.remove(services, acting_key(request), event_type=event_type)
    return EventTypeDeleted(type=event_type, status="deleted")


def _event_type(request: web.Request) -> str:
    name = request.match_info["type"]
    if len(name) > 200 or not re.fullmatch(EVENT_TYPE_PATTERN, name):
        raise ValidationFailed({"type": "must be a dot-separated event type name"})
    return name


@ROUTES.post(
    f"{BASE}/send",
    response=SendAccepted,
    status=202,
    responses=IDEMPOTENT_RESPONSES,
    summary="Send one notification, now or scheduled (deliverAt / delaySeconds); "
    "Idempotency-Key: a retry gets the first answer",
    **SENDER,
)
async def send(request: web.Request, body: SendBody) -> web.Response:
    key = idempotency_key(request, body.idempotency_key)
    caller = acting_key(request)
    item = body.request(schedule_key(caller, key) if key is not None else None)
    return await send_once(request, caller, body, [item], key)


@ROUTES.post(
    f"{BASE}/send-batch",
    body_limit=BATCH_BODY_LIMIT,
    response=BatchAccepted,
    status=202,
    responses=IDEMPOTENT_RESPONSES,
    summary=f"Send up to {MAX_BATCH} notifications, all or none",
    **SENDER,
)
async def send_batch(request: web.Request, body: SendBatchBody) -> web.Response:
    key = idempotency_key(request, body.idempotency_key)
    items = [item.request() for item in body.items]
    return await send_once(request, acting_key(request), body, items, key, batch=True)


async def _cancel(
    request: web.Request, *, notification_id: uuid.UUID | None, key: str | None
) -> ScheduledCancelled:
    services = notifications_of(request.app)
    caller = acting_key(request)
    cancelled = await cancel_scheduled(
        services,
        notification_id=notification_id,
        idempotency_key=schedule_key(caller, key) if key is not None else None,
    )
    async with services.db.transaction() as conn:
        await record_key_action(
            conn, caller, action="notifications.cancelled", target=str(cancelled)
        )
    return ScheduledCancelled(id=cancelled, status="cancelled")


CANCEL_RESPONSES = {
    404: "NOT_FOUND: no scheduled notification with this id (or this key's Idempotency-Key)",
    409: "CONFLICT: it is already being delivered",
}


@ROUTES.delete(
    f"{BASE}/scheduled/{{id}}",
    responses=CANCEL_RESPONSES,
    summary="Cancel a scheduled notification before it is due (again: the same answer)",
    **SENDER,
)
async def cancel_by_id(request: web.Request) -> ScheduledCancelled:
    return await _cancel(request, notification_id=path_uuid(request, "id"), key=None)


@ROUTES.post(
    f"{BASE}/scheduled/cancel",
    responses=CANCEL_RESPONSES,
    summary="Cancel a scheduled notification by id or by the Idempotency-Key it was sent with",
    **SENDER,
)
async def cancel_by_body(request: web.Request, body: CancelScheduledBody) -> ScheduledCancelled:
    if (body.id is None) == (body.idempotency_key is None):
        raise ValidationFailed({"id": "give id or idempotencyKey"})
    return await _cancel(request, notification_id=body.id, key=body.idempotency_key)
