"""Notification dispatch: send() accepts, the worker applies the rules and persists.

send() validates the payload and returns once the notification is accepted:
- QUEUES_ENABLED on: a `notifications.dispatch` job row is written by the job queue (in the
  caller's transaction when `conn` is given) and a runner of any instance runs `dispatch`.
- off: `dispatch` runs right here, in the caller's task (and transaction, if given); the
  deliveries that talk to outside services (email, web push) run as in-process tasks.
Either way send() never waits for an email provider or a push service.

dispatch() keeps SERVICE.md's order: re-validate, resolve the definition, self-action guard,
dedup, preferences, persist the notification with one delivery row per channel, fan out.
It is idempotent on the notification id chosen by send(), so a job that runs twice (its
process died before the job was marked done) delivers once. With queues on, the email and web
push jobs are written by the job queue in the same transaction as the notification: a
rolled-back dispatch queues nothing.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ValidationError

from tenantd.db import Conn
from tenantd.errors import NotFound, ValidationFailed
from tenantd.notifications import queries
from tenantd.notifications.registry import EventDefinition
from tenantd.notifications.services import NOTIFICATION_SERVICES
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.notifications.services import NotificationServices

log = logging.getLogger(__name__)

DISPATCH_ATTEMPTS = 8
EMAIL_ATTEMPTS = 8
PUSH_ATTEMPTS = 3
DISPATCH_KIND = "notifications.dispatch"
FOLLOW_UP_KINDS = {"email": "notifications.email", "web_push": "notifications.web_push"}

Status = Literal["queued", "created", "duplicate", "self_action"]


class InvalidPayload(ValidationFailed):
    """The payload does not match the event's schema; `fields` names each bad field."""

    def __init__(self, event_type: str, fields: dict[str, str]):
        super().__init__(fields, f"Invalid payload for {event_type}")
        self.event_type = event_type


class UnknownRecipient(NotFound):
    message = "Unknown recipient user"


@dataclass(frozen=True, slots=True)
class SendOutcome:
    notification_id: uuid.UUID | None  # queued: the id the notification will get
    status: Status


@contextlib.asynccontextmanager
async def _using(
    services: NotificationServices, conn: Conn | None, *, transaction: bool
) -> AsyncIterator[Conn]:
    """The caller's connection when given, else one of our own; in a transaction if asked."""
    if conn is None:
        opened = services.db.transaction() if transaction else services.db.connection()
        async with opened as own:
            yield own
    elif transaction:
        async with conn.transaction() as joined:
            yield joined
    else:
        yield conn


def services_of(target: web.Application | NotificationServices) -> NotificationServices:
    """Accept an aiohttp Application or the services bundle itself."""
    if isinstance(target, web.Application):
        return target[NOTIFICATION_SERVICES]
    return target


def field_errors(error: ValidationError) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "payload"
        fields.setdefault(location, item["msg"])
    return fields


def validate_payload(definition: EventDefinition, payload: Any) -> BaseModel:
    """The payload as the event's pydantic model, or InvalidPayload naming the fields."""
    try:
        return definition.schema.model_validate(payload)
    except ValidationError as error:
        raise InvalidPayload(definition.type, field_errors(error)) from None


def as_uuid(value: Any, field: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationFailed({field: "must be a UUID"}) from None


def live_channels(settings: Settings, channels: tuple[str, ...]) -> tuple[str, ...]:
    """Channels that exist in this configuration (sse and web_push are switched)."""
    live = []
    for channel in channels:
        if channel == "sse" and not settings.notifications_sse_enabled:
            continue
        if channel == "web_push" and not settings.web_push_enabled:
            continue
        live.append(channel)
    return tuple(live)


async def send(
    app_or_services: Any,
    event_type: str,
    *,
    recipient_user_id: uuid.UUID | str,
    payload: dict[str, Any],
    account_id: uuid.UUID | str | None = None,
    conn: Conn | None = None,
) -> SendOutcome:
    """Validate and accept a notification; never waits for email or push delivery."""
    services = services_of(app_or_services)
    event = services.registry.get(event_type)
    model = validate_payload(event.definition, payload)
    user_id = as_uuid(recipient_user_id, "recipientUserId")
    account = as_uuid(account_id, "accountId") if account_id is not None else None
    notification_id = uuid.uuid4()
    if not services.settings.queues_enabled:
        return await dispatch(
            services,
            notification_id=notification_id,
            event_type=event_type,
            recipient_user_id=user_id,
            payload=model.model_dump(mode="json"),
            account_id=account,
            conn=conn,
        )
    job = {
        "notificationId": str(notification_id),
        "eventType": event_type,
        "recipientUserId": str(user_id),
        "accountId": str(account) if account else None,
        "payload": model.model_dump(mode="json"),
    }
    async with _using(services, conn, transaction=False) as own:
        # One statement: the job row, written only if the recipient exists.
        job_id = await services.jobs.enqueue_for_user(own, DISPATCH_KIND, job, user_id=user_id)
    if job_id is None:
        raise UnknownRecipient(f"Unknown recipient user: {user_id}")
    return SendOutcome(notification_id=notification_id, status="queued")


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One notification of `send_many`: what `send` takes."""

    event_type: str
    recipient_user_id: uuid.UUID
    payload: dict[str, Any]
    account_id: uuid.UUID | None = None


MAX_FIELD_ERRORS = 100  # a batch of 1,000 bad items names the first hundred problems


def _batch_errors(
    services: NotificationServices, requests: Sequence[SendRequest], prefix: Callable[[int], str]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Every item validated against its event's schema: field errors named by item, and the
    payloads as the models dump them."""
    errors: dict[str, str] = {}
    payloads: list[dict[str, Any]] = []
    for index, request in enumerate(requests):
        if len(errors) >= MAX_FIELD_ERRORS:
            break
        if request.event_type not in services.registry:
            errors[f"{prefix(index)}type"] = f"unknown event type {request.event_type!r}"
            continue
        definition = services.registry.get(request.event_type).definition
        try:
            model = definition.schema.model_validate(request.payload)
        except ValidationError as error:
            for item in error.errors():
                location = ".".join(str(part) for part in item["loc"])
                name = f"{prefix(index)}payload" + (f".{location}" if location else "")
                errors.setdefault(name, item["msg"])
            continue
        payloads.append(model.model_dump(mode="json"))
    return errors, payloads


def _item(index: int) -> str:
    return f"items.{index}."


async def send_many(
    app_or_services: Any,
    requests: Sequence[SendRequest],
    *,
    conn: Conn | None = None,
    field_prefix: Callable[[int], str] = _item,
) -> list[SendOutcome]:
    """`send` for many notifications, all or none: every item is validated first (one 422
    naming each bad field as `items.<i>.payload.<field>`, `items.<i>.type`,
    `items.<i>.recipientUserId`), the recipients are checked in one query, and with queues on
    the dispatch jobs are written in one statement. Dispatch itself is `dispatch`, per item:
    the same guard, dedup, preferences and channels as `send`."""
    services = services_of(app_or_services)
    errors, payloads = _batch_errors(services, requests, field_prefix)
    if errors:
        raise ValidationFailed(errors, "Invalid notifications")
    queue = services.settings.queues_enabled
    ids = [uuid.uuid4() for _ in requests]
    async with _using(services, conn, transaction=True) as own:
        missing = await queries.missing_users(own, user_ids=[r.recipient_user_id for r in requests])
        if missing:
            unknown = [i for i, r in enumerate(requests) if r.recipient_user_id in missing]
            raise ValidationFailed(
                {
                    f"{field_prefix(i)}recipientUserId": "unknown user"
                    for i in unknown[:MAX_FIELD_ERRORS]
                },
                "Unknown recipient user",
            )
        if queue:
            jobs = [
                {
                    "notificationId": str(notification_id),
                    "eventType": request.event_type,
                    "recipientUserId": str(request.recipient_user_id),
                    "accountId": str(request.account_id) if request.account_id else None,
                    "payload": payload,
                }
                for notification_id, request, payload in zip(ids, requests, payloads, strict=True)
            ]
            await services.jobs.submit_many(services, DISPATCH_KIND, jobs, conn=own)
            outcomes = [SendOutcome(notification_id=i, status="queued") for i in ids]
        else:
            outcomes = [
                await dispatch(
                    services,
                    notification_id=notification_id,
                    event_type=request.event_type,
                    recipient_user_id=request.recipient_user_id,
                    payload=payload,
                    account_id=request.account_id,
                    conn=own,
                )
                for notification_id, request, payload in zip(ids, requests, payloads, strict=True)
            ]
    if queue:
        services.jobs.wake()
    return outcomes


async def dispatch(
    services: NotificationServices,
    *,
    notification_id: uuid.UUID,
    event_type: str,
    recipient_user_id: uuid.UUID,
    payload: dict[str, Any],
    account_id: uuid.UUID | None = None,
    conn: Conn | None = None,
) -> SendOutcome:
    """The worker: guard, dedup, preferences, persist, fan out (idempotent on the id)."""
    event = services.registry.get(event_type)
    definition = event.definition
    model = validate_payload(definition, payload)
    recipient = str(recipient_user_id)
    if definition.self_action_guard is not None and definition.self_action_guard(recipient, model):
        return SendOutcome(notification_id=None, status="self_action")
    dedup_key = None
    window = 0
    if definition.dedup is not None:
        dedup_key = f"{definition.type}:{definition.dedup.key(recipient, model)}"
        window = int(definition.dedup.window_seconds)
    assert definition.in_app is not None  # the registry insists
    content = definition.in_app(recipient, model)
    channels = live_channels(services.settings, definition.default_channels)
    queue = services.settings.queues_enabled
    arguments: dict[str, Any] = {
        "notification_id": notification_id,
        "user_id": recipient_user_id,
        "account_id": account_id,
        "event_type": definition.type,
        "title": content.title,
        "body": content.body,
        "cta_url": content.cta_url,
        "cta_label": content.cta_label,
        "payload": model.model_dump(mode="json"),
        "dedup_key": dedup_key,
        "window_seconds": window,
        "channels": channels,
    }
    # With queues on, the follow-up jobs commit with the notification or not at all.
    follow_ups = queue and any(channel in FOLLOW_UP_KINDS for channel in channels)
    async with _using(services, conn, transaction=follow_ups) as own:
        row = await queries.persist_dispatch(own, **arguments)
        if queue and row["id"] is not None:
            for channel in row["pending"]:
                await services.jobs.submit(
                    services,
                    FOLLOW_UP_KINDS[channel],
                    {"notificationId": str(notification_id)},
                    conn=own,
                )
    if not row["user_found"]:
        raise UnknownRecipient(f"Unknown recipient user: {recipient_user_id}")
    if row["id"] is None:
        return SendOutcome(notification_id=None, status="duplicate")
    if queue:
        if row["pending"]:
            services.jobs.wake()
    else:
        for channel in row["pending"]:
            await services.jobs.submit(
                services,
                FOLLOW_UP_KINDS[channel],
                {"notificationId": str(notification_id)},
                conn=conn,
            )
    return SendOutcome(notification_id=notification_id, status="created")
