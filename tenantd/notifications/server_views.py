"""Server routes of notifications (API key with `notifications:send`): event types, send,
send-batch."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from aiohttp import web
from pydantic import Field

from tenantd.apikeys.idempotency import KEY_PATTERN, fingerprint
from tenantd.errors import ValidationFailed
from tenantd.notifications import server
from tenantd.notifications.schemas import EventType
from tenantd.notifications.service import SendRequest
from tenantd.notifications.services import NOTIFICATION_SERVICES
from tenantd.principal import acting_key
from tenantd.web.json import ok
from tenantd.web.schemas import ApiModel, Matches, Multiline, RequestBody
from tenantd.web.spec import API_BODY_LIMIT, Access, Routes

ROUTES = Routes("notifications (server)")

BASE = "/api/v1/notifications"
SCOPE = "notifications:send"
MAX_BATCH = 1000
BATCH_BODY_LIMIT = 16 * API_BODY_LIMIT  # 1,000 items of up to ~16 KiB each
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

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

    def request(self) -> SendRequest:
        return SendRequest(
            event_type=self.type,
            recipient_user_id=self.recipient_user_id,
            payload=self.payload,
            account_id=self.account_id,
        )


class SendBody(SendItem):
    idempotency_key: IdempotencyKey | None = None


class SendBatchBody(RequestBody):
    items: list[SendItem] = Field(min_length=1, max_length=MAX_BATCH)
    idempotency_key: IdempotencyKey | None = None


class SendAccepted(ApiModel):
    id: uuid.UUID | None  # None: dropped at once (duplicate, self-action; queues off only)
    status: str  # queued | created | duplicate | self_action


class BatchAccepted(ApiModel):
    ids: list[uuid.UUID]  # the accepted notifications, in item order
    items: list[SendAccepted]  # one per item, in order


class EventTypeOut(ApiModel):
    type: str
    default_channels: list[str]
    channels: list[str]  # the default channels that exist in this configuration
    payload_schema: dict[str, Any]  # JSON Schema of the payload (from the pydantic model)


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


def answer(accepted: server.Accepted) -> web.Response:
    response = ok(accepted.data, status=202)
    if accepted.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response


@ROUTES.get(
    f"{BASE}/event-types",
    access=Access.API_KEY,
    scope=SCOPE,
    response=list[EventTypeOut],
    summary="Every notification event type: default channels and payload JSON Schema",
)
async def event_types(request: web.Request) -> list[dict[str, Any]]:
    services = request.app[NOTIFICATION_SERVICES]
    return server.event_types(services.registry, services.settings)


@ROUTES.post(
    f"{BASE}/send",
    access=Access.API_KEY,
    scope=SCOPE,
    body=SendBody,
    response=SendAccepted,
    status=202,
    responses={409: "The Idempotency-Key was used with a different request"},
    summary="Send one notification (Idempotency-Key: a retry gets the first answer)",
)
async def send(request: web.Request, body: SendBody) -> web.Response:
    key = idempotency_key(request, body.idempotency_key)
    accepted = await server.accept(
        request.app[NOTIFICATION_SERVICES],
        acting_key(request),
        route="send",
        requests=[body.request()],
        batch=False,
        idempotency_key=key,
        request_hash=fingerprint(body.model_dump(mode="json", exclude={"idempotency_key"})),
    )
    return answer(accepted)


@ROUTES.post(
    f"{BASE}/send-batch",
    access=Access.API_KEY,
    scope=SCOPE,
    body=SendBatchBody,
    body_limit=BATCH_BODY_LIMIT,
    response=BatchAccepted,
    status=202,
    responses={409: "The Idempotency-Key was used with a different request"},
    summary=f"Send up to {MAX_BATCH} notifications, all or none",
)
async def send_batch(request: web.Request, body: SendBatchBody) -> web.Response:
    key = idempotency_key(request, body.idempotency_key)
    accepted = await server.accept(
        request.app[NOTIFICATION_SERVICES],
        acting_key(request),
        route="send-batch",
        requests=[item.request() for item in body.items],
        batch=True,
        idempotency_key=key,
        request_hash=fingerprint(body.model_dump(mode="json", exclude={"idempotency_key"})),
    )
    return answer(accepted)
