"""Notification dispatch: send() accepts, the worker applies the rules and persists.

send() validates the payload and returns once the notification is accepted:
- QUEUES_ENABLED on: a `notifications.dispatch` job row is written by the job queue (in the
  caller's transaction when `conn` is given) and a runner of any instance runs `dispatch`.
- off: `dispatch` runs right here, in the caller's task (and transaction, if given); the
  deliveries that talk to outside services (email, web push) are the same jobs, run in this
  process once that transaction commits (jobs.enqueue).
Either way send() never waits for an email provider or a push service.

dispatch() keeps SERVICE.md's order: re-validate, resolve the definition, self-action guard,
dedup, preferences, persist the notification with one delivery row per channel, fan out.
It is idempotent on the notification id chosen by send(), so a job that runs twice (its
process died before the job was marked done) delivers once. The email and web push jobs are
enqueued in the same transaction as the notification: a rolled-back dispatch runs none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from tenantd.db import Conn, Row
from tenantd.errors import Conflict, NotFound, ValidationFailed
from tenantd.jobs import queries as job_queries
from tenantd.jobs.settings import JobSettings
from tenantd.notifications import queries
from tenantd.notifications.quiet import DELAYED_CHANNELS, quiet_delay
from tenantd.notifications.registry import EventDefinition, InAppContent, render, wants_locale
from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications

log = logging.getLogger(__name__)

DISPATCH_ATTEMPTS = 8
EMAIL_ATTEMPTS = 8
PUSH_ATTEMPTS = 3
DISPATCH_KIND = "notifications.dispatch"
FOLLOW_UP_KINDS = {"email": "notifications.email", "web_push": "notifications.web_push"}

Status = Literal["queued", "created", "duplicate", "self_action", "scheduled", "digested"]
DIGEST_KIND = "notifications.digest"
MAX_DELAY_SECONDS = 366 * 86_400  # a scheduled send is at most a year ahead
# A user's frequency of a digest event's channel: its digest window (instant: none).
FREQUENCY_WINDOWS: dict[str, float] = {"instant": 0.0, "hourly": 3600.0, "daily": 86_400.0}


class InvalidPayload(ValidationFailed):
    """The payload does not match the event's schema; `fields` names each bad field."""

    def __init__(self, event_type: str, fields: dict[str, str]):
        super().__init__(fields, f"Invalid payload for {event_type}")
        self.event_type = event_type


class UnknownRecipient(NotFound):
    message = "Unknown recipient user"


def new_notification_id() -> uuid.UUID:
    """A UUIDv7 (RFC 9562: Unix milliseconds, then 74 random bits). Ids in the order they
    were made insert at the right edge of the id indexes (the notifications' key and the
    delivery rows' key), a few pages that stay cached, where a random UUIDv4 writes to any
    leaf of an index that at 10M notifications no longer fits in the buffer cache."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 9562 variant
    return uuid.UUID(int=value)


@dataclass(frozen=True, slots=True)
class SendOutcome:
    notification_id: uuid.UUID | None  # queued: the id the notification will get
    status: Status


@contextlib.asynccontextmanager
async def _using(
    services: Notifications, conn: Conn | None, *, transaction: bool
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
        if (
            channel == "sse"
            and not settings.section(NotificationSettings).notifications_sse_enabled
        ):
            continue
        if channel == "web_push" and not settings.section(NotificationSettings).web_push_enabled:
            continue
        live.append(channel)
    return tuple(live)


async def send(
    services: Notifications,
    event_type: str,
    *,
    recipient_user_id: uuid.UUID | str,
    payload: dict[str, Any],
    account_id: uuid.UUID | str | None = None,
    conn: Conn | None = None,
    deliver_at: dt.datetime | None = None,
    delay_seconds: float | None = None,
    idempotency_key: str | None = None,
) -> SendOutcome:
    """Validate and accept a notification; never waits for email or push delivery.

    `deliver_at` (aware datetime) or `delay_seconds` schedule it through the durable queue
    (QUEUES_ENABLED on); until it is due, `cancel_scheduled` takes it back by id or by
    `idempotency_key` (a second scheduled send with the same key returns the first's id).
    """
    event = services.registry.get(event_type)
    model = validate_payload(event.definition, payload)
    user_id = as_uuid(recipient_user_id, "recipientUserId")
    account = as_uuid(account_id, "accountId") if account_id is not None else None
    delay = schedule_delay(deliver_at=deliver_at, delay_seconds=delay_seconds)
    send = Dispatch(
        new_notification_id(), event_type, user_id, model.model_dump(mode="json"), account
    )
    if delay is not None or idempotency_key is not None:
        return await _schedule(
            services, send, delay=delay or 0.0, idempotency_key=idempotency_key, conn=conn
        )
    if not services.settings.section(JobSettings).queues_enabled:
        return await dispatch_one(services, send, conn=conn)
    # The job row, written only if the recipient exists. Without a connection of the caller's,
    # one statement shared with the sends of this process that overlap this one, committed
    # before we answer.
    [job_id] = await services.jobs.enqueue(
        conn or services.db, DISPATCH_KIND, send.job_payload(), for_user=user_id
    )
    if job_id is None:
        raise UnknownRecipient(f"Unknown recipient user: {user_id}")
    return SendOutcome(notification_id=send.notification_id, status="queued")


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One dispatch: what `dispatch` takes (a queued job's payload, an item of a batch)."""

    notification_id: uuid.UUID
    event_type: str
    recipient_user_id: uuid.UUID
    payload: dict[str, Any]
    account_id: uuid.UUID | None = None
    send_sequence: int | None = None  # its job's id: a digest lists items in send order

    def job_payload(self) -> dict[str, Any]:
        """The payload of its `notifications.dispatch` job (read back by `from_job`)."""
        return {
            "notificationId": str(self.notification_id),
            "eventType": self.event_type,
            "recipientUserId": str(self.recipient_user_id),
            "accountId": str(self.account_id) if self.account_id else None,
            "payload": self.payload,
        }

    @classmethod
    def from_job(cls, payload: dict[str, Any], job_id: int | None) -> Dispatch:
        """The dispatch of a `notifications.dispatch` job; the job's id is the send's
        sequence (a digest lists its items in send order)."""
        account = payload.get("accountId")
        return cls(
            notification_id=uuid.UUID(payload["notificationId"]),
            event_type=payload["eventType"],
            recipient_user_id=uuid.UUID(payload["recipientUserId"]),
            payload=payload["payload"],
            account_id=uuid.UUID(account) if account else None,
            send_sequence=job_id,
        )


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One notification of `send_many`: what `send` takes."""

    event_type: str
    recipient_user_id: uuid.UUID
    payload: dict[str, Any]
    account_id: uuid.UUID | None = None
    deliver_at: dt.datetime | None = None  # scheduled (QUEUES_ENABLED on), as `send`
    delay_seconds: float | None = None
    idempotency_key: str | None = None  # of a scheduled item: what cancel_scheduled finds


MAX_FIELD_ERRORS = 100  # a batch of 1,000 bad items names the first hundred problems


def _batch_errors(
    services: Notifications, requests: Sequence[SendRequest], prefix: Callable[[int], str]
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


def _batch_delays(
    requests: Sequence[SendRequest],
    prefix: Callable[[int], str],
    errors: dict[str, str],
    *,
    queue: bool,
) -> list[float | None]:
    """Each item's delay (None: now); bad or impossible schedules go into `errors`."""
    delays: list[float | None] = []
    for index, request in enumerate(requests):
        delay: float | None = None
        try:
            delay = schedule_delay(
                deliver_at=request.deliver_at, delay_seconds=request.delay_seconds
            )
        except ValidationFailed as error:
            errors.update({f"{prefix(index)}{name}": text for name, text in error.fields.items()})
        if delay is not None and not queue:
            errors[f"{prefix(index)}deliverAt"] = "scheduled sends need QUEUES_ENABLED=true"
        delays.append(delay)
    return delays


def _item(index: int) -> str:
    return f"items.{index}."


async def send_many(
    services: Notifications,
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
    errors, payloads = _batch_errors(services, requests, field_prefix)
    queue = services.settings.section(JobSettings).queues_enabled
    delays = _batch_delays(requests, field_prefix, errors, queue=queue)
    if errors:
        raise ValidationFailed(errors, "Invalid notifications")
    sends = [
        Dispatch(new_notification_id(), r.event_type, r.recipient_user_id, payload, r.account_id)
        for r, payload in zip(requests, payloads, strict=True)
    ]
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
                send.job_payload()
                for send, delay in zip(sends, delays, strict=True)
                if delay is None
            ]
            if jobs:
                await services.jobs.enqueue(own, DISPATCH_KIND, *jobs)
            outcomes = [
                SendOutcome(notification_id=send.notification_id, status="queued") for send in sends
            ]
            for index, delay in enumerate(delays):
                if delay is None:
                    continue
                outcomes[index] = await _schedule(
                    services,
                    sends[index],
                    delay=delay,
                    idempotency_key=requests[index].idempotency_key,
                    conn=own,
                )
        else:
            outcomes = [await dispatch_one(services, send, conn=own) for send in sends]
    return outcomes


async def dispatch(
    services: Notifications,
    *,
    notification_id: uuid.UUID,
    event_type: str,
    recipient_user_id: uuid.UUID,
    payload: dict[str, Any],
    account_id: uuid.UUID | None = None,
    conn: Conn | None = None,
) -> SendOutcome:
    """The worker: guard, dedup, preferences, persist, fan out (idempotent on the id).
    Many at once: `dispatch_batch.dispatch_many`."""
    send = Dispatch(notification_id, event_type, recipient_user_id, payload, account_id)
    return await dispatch_one(services, send, conn=conn)


@dataclass(frozen=True, slots=True)
class Screened:
    """A digest event's send the digest path screened already (dedup and throttle are not
    applied again): it goes at once to `channels` only (no digest then); `forced_reason`
    "throttled" when it was over the limit."""

    channels: Sequence[str]
    forced_reason: str | None = None


async def dispatch_one(
    services: Notifications,
    send: Dispatch,
    *,
    conn: Conn | None = None,
    screened: Screened | None = None,
) -> SendOutcome:
    """`dispatch` of one `Dispatch` (a queued job's, a digest's instant channels)."""
    ready = await prepare_dispatch(services, send, conn=conn, screened=screened)
    if isinstance(ready, SendOutcome):
        return ready
    async with _using(services, conn, transaction=needs_transaction(services, ready)) as own:
        ready = await count_throttle(own, ready)
        row = await queries.persist_dispatch(own, ready.notification)
        return await settle_dispatch(services, own, ready, row)


@dataclass(frozen=True, slots=True)
class ReadyDispatch:
    """A dispatch ready for its one statement: the notification and what decides the rest."""

    notification: queries.NewNotification
    definition: EventDefinition
    throttle_key: str | None  # counted just before the write (not yet counted)


class StatementRefused(RuntimeError):
    """A dispatch that was to make no statement but its write needed one (dispatch_many)."""


async def prepare_dispatch(
    services: Notifications,
    send: Dispatch,
    *,
    conn: Conn | None = None,
    screened: Screened | None = None,
    statements: bool = True,
) -> ReadyDispatch | SendOutcome:
    """Everything of `dispatch` before its write: the outcome when there is none to make
    (self-action, a digest item), else the notification ready to be written. `statements`
    False: refuse (StatementRefused) before any statement, rather than make one."""
    event = services.registry.get(send.event_type)
    definition = event.definition
    model = validate_payload(definition, send.payload)
    recipient = str(send.recipient_user_id)
    if definition.self_action_guard is not None and definition.self_action_guard(recipient, model):
        return SendOutcome(notification_id=None, status="self_action")
    dedup_key = None
    window = 0
    if definition.dedup is not None and screened is None:
        dedup_key = f"{definition.type}:{definition.dedup.key(recipient, model)}"
        window = int(definition.dedup.window_seconds)
    if (
        definition.digest is not None
        and not definition.critical
        and services.settings.section(JobSettings).queues_enabled
        and screened is None
    ):
        if not statements:
            raise StatementRefused("a digest item")
        return await _add_to_digest(
            services,
            send,
            definition=definition,
            model=model,
            conn=conn,
            dedup=(dedup_key, window) if dedup_key is not None else None,
        )
    throttle_key = None
    if definition.throttle is not None and screened is None:
        if not statements:
            raise StatementRefused("a throttle count")
        throttle_key = f"{definition.type}:{definition.throttle.key(recipient, model)}"
    assert definition.in_app is not None  # the registry insists
    if not statements and wants_locale(definition.in_app):
        raise StatementRefused("a locale read")
    locale = await _locale_for(services, conn, definition.in_app, send.recipient_user_id)
    content = render(definition.in_app, recipient, model, locale)
    channels = live_channels(services.settings, definition.default_channels)
    if screened is not None:
        channels = tuple(channel for channel in channels if channel in screened.channels)
    notification = queries.NewNotification(
        notification_id=send.notification_id,
        user_id=send.recipient_user_id,
        account_id=send.account_id,
        event_type=definition.type,
        title=content.title,
        body=content.body,
        cta_url=content.cta_url,
        cta_label=content.cta_label,
        payload=model.model_dump(mode="json"),
        dedup_key=dedup_key,
        window_seconds=window,
        channels=channels,
        critical=definition.critical,
        forced_reason=screened.forced_reason if screened is not None else None,
    )
    return ReadyDispatch(
        notification=notification, definition=definition, throttle_key=throttle_key
    )


def needs_transaction(services: Notifications, ready: ReadyDispatch) -> bool:
    """With queues on, the follow-up jobs commit with the notification or not at all; a
    throttle count commits with the send it counts."""
    follow_ups = services.settings.section(JobSettings).queues_enabled and any(
        channel in FOLLOW_UP_KINDS for channel in ready.notification.channels
    )
    return follow_ups or ready.throttle_key is not None


async def count_throttle(conn: Conn, ready: ReadyDispatch) -> ReadyDispatch:
    """Count the send against its throttle (once: not again for a re-run job); over the
    limit, every delivery is written `suppressed`, `throttled`."""
    throttle = ready.definition.throttle
    if ready.throttle_key is None or throttle is None:
        return ready
    if await queries.notification_exists(conn, ready.notification.notification_id):
        return ready
    sent = await queries.count_throttled(
        conn, key=ready.throttle_key, window_seconds=int(throttle.window_seconds)
    )
    if sent <= int(throttle.limit):
        return ready
    notification = dataclasses.replace(ready.notification, forced_reason="throttled")
    return dataclasses.replace(ready, notification=notification)


async def settle_dispatch(
    services: Notifications, conn: Conn, ready: ReadyDispatch, row: Row
) -> SendOutcome:
    """After the write (`row`, its answer): one delivery job per pending channel, enqueued on
    `conn` (they run after its commit: queued, or in this process), and the outcome."""
    notification_id = ready.notification.notification_id
    if row["id"] is not None:
        wait = 0.0
        if services.settings.section(JobSettings).queues_enabled and not ready.definition.critical:
            wait = quiet_delay(
                dt.datetime.now(dt.UTC),
                time_zone=row["time_zone"],
                start=row["quiet_hours_start"],
                end=row["quiet_hours_end"],
            )
        for channel in row["pending"]:
            # Quiet hours: the delivery job is due when they end.
            delay = wait if channel in DELAYED_CHANNELS else 0.0
            await services.jobs.enqueue(
                conn,
                FOLLOW_UP_KINDS[channel],
                {"notificationId": str(notification_id)},
                delay_seconds=delay,
            )
    if not row["user_found"]:
        raise UnknownRecipient(f"Unknown recipient user: {ready.notification.user_id}")
    if row["id"] is None:
        return SendOutcome(notification_id=None, status="duplicate")
    return SendOutcome(notification_id=notification_id, status="created")


# -- scheduled and delayed sends (issue 18) ----------------------------------------------------


def schedule_delay(*, deliver_at: dt.datetime | None, delay_seconds: float | None) -> float | None:
    """Seconds from now until the send is due (None: not scheduled); a past time is now."""
    if deliver_at is not None and delay_seconds is not None:
        raise ValidationFailed({"deliverAt": "give deliverAt or delaySeconds, not both"})
    if deliver_at is not None:
        if deliver_at.tzinfo is None:
            raise ValidationFailed({"deliverAt": "must carry a time zone"})
        delay = (deliver_at - dt.datetime.now(dt.UTC)).total_seconds()
    elif delay_seconds is not None:
        delay = float(delay_seconds)
        if delay != delay or delay < 0:  # NaN or negative
            raise ValidationFailed({"delaySeconds": "must be a number >= 0"})
    else:
        return None
    if delay > MAX_DELAY_SECONDS:
        raise ValidationFailed({"deliverAt": "at most 366 days ahead"})
    return max(delay, 0.0)


async def _schedule(
    services: Notifications,
    send: Dispatch,
    *,
    delay: float,
    idempotency_key: str | None,
    conn: Conn | None,
) -> SendOutcome:
    """A dispatch job due in `delay` seconds plus the row that finds it for a cancel."""
    if not services.settings.section(JobSettings).queues_enabled:
        raise ValidationFailed(
            {"deliverAt": "scheduled sends and idempotency keys need QUEUES_ENABLED=true"}
        )
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
        raise ValidationFailed({"idempotencyKey": "1 to 255 characters"})
    async with _using(services, conn, transaction=True) as own:
        if idempotency_key is not None:
            # One scheduler of a key at a time; the second finds the first's row.
            await queries.lock_idempotency_key(own, idempotency_key)
            existing = await queries.scheduled_by_key(own, idempotency_key)
            if existing is not None:
                return SendOutcome(notification_id=existing["notification_id"], status="scheduled")
        if not await queries.user_exists(own, user_id=send.recipient_user_id):
            raise UnknownRecipient(f"Unknown recipient user: {send.recipient_user_id}")
        [job_id] = await services.jobs.enqueue(
            own, DISPATCH_KIND, send.job_payload(), delay_seconds=delay
        )
        assert job_id is not None  # scheduled sends need the durable queue (checked above)
        await queries.insert_scheduled(
            own,
            notification_id=send.notification_id,
            idempotency_key=idempotency_key,
            job_id=job_id,
            event_type=send.event_type,
            user_id=send.recipient_user_id,
            delay_seconds=delay,
        )
    return SendOutcome(notification_id=send.notification_id, status="scheduled")


async def cancel_scheduled(
    services: Notifications,
    *,
    notification_id: uuid.UUID | str | None = None,
    idempotency_key: str | None = None,
) -> uuid.UUID:
    """Take back a scheduled send before it is due; 404 unknown, 409 once it started."""
    if notification_id is None and idempotency_key is None:
        raise ValidationFailed({"id": "give a notification id or an idempotency key"})
    wanted = as_uuid(notification_id, "id") if notification_id is not None else None
    async with services.db.transaction() as conn:
        row = await queries.lock_scheduled(
            conn, notification_id=wanted, idempotency_key=idempotency_key
        )
        if row is None:
            raise NotFound("No scheduled notification with this id or key")
        if row["cancelled_at"] is None:
            if not await job_queries.cancel_queued_job(conn, row["job_id"]):
                raise Conflict("The notification is already being delivered")
            await queries.mark_scheduled_cancelled(conn, row["notification_id"])
    cancelled: uuid.UUID = row["notification_id"]
    return cancelled


# -- digests (issue 18) --------------------------------------------------------------------------


async def _add_to_digest(
    services: Notifications,
    send: Dispatch,
    *,
    definition: EventDefinition,
    model: BaseModel,
    conn: Conn | None,
    dedup: tuple[str, int] | None = None,
) -> SendOutcome:
    """Add the send to the open digest of its key; the first item also queues the flush job,
    due when the window closes (idempotent on the send's id).

    Dedup and throttle apply as on the instant path, once per send: a dedup key (`dedup`:
    key and window) already held makes it a duplicate (not collected), and over the
    throttle's limit the send is recorded with every delivery `suppressed`, `throttled`.

    A user's frequencies (instant, hourly, daily per channel) split the channels: the instant
    ones are dispatched now, the others join the digest of their window (its own key, its
    channels remembered). Without a choice it is one digest of the event's window."""
    assert definition.digest is not None
    recipient = str(send.recipient_user_id)
    key = f"{definition.type}:{recipient}:{definition.digest.key(recipient, model)}"
    payload = model.model_dump(mode="json")
    channels = live_channels(services.settings, definition.default_channels)
    async with _using(services, conn, transaction=True) as own:
        if not await queries.user_exists(own, user_id=send.recipient_user_id):
            raise UnknownRecipient(f"Unknown recipient user: {send.recipient_user_id}")
        chosen = {
            row["channel"]: row["frequency"]
            for row in await queries.frequencies(
                own, user_id=send.recipient_user_id, event_type=definition.type
            )
        }
        default = float(definition.digest.window_seconds)
        groups: dict[float, list[str]] = {}
        for channel in channels:
            window = FREQUENCY_WINDOWS.get(chosen.get(channel, ""), default)
            groups.setdefault(window, []).append(channel)
        if not chosen:
            groups = {default: []}  # every channel: the digest of the event's window
        split = bool(chosen)
        item_ids = {
            window: uuid.uuid5(send.notification_id, str(window)) if split else send.notification_id
            for window in groups
        }
        if await queries.digest_send_seen(own, ids=[send.notification_id, *item_ids.values()]):
            return SendOutcome(notification_id=None, status="duplicate")  # a re-run job
        verdict = await _screen_digested(own, definition, recipient, model, dedup)
        if verdict == "duplicate":
            return SendOutcome(notification_id=None, status="duplicate")
        # Screened above: the instant path neither dedups nor counts this send again.
        dispatch_now = functools.partial(dispatch_one, services, send, conn=own)
        if verdict == "throttled":
            return await dispatch_now(screened=Screened(channels, forced_reason="throttled"))
        outcome: SendOutcome | None = None
        for window, members in sorted(groups.items()):
            if window <= 0:
                outcome = await dispatch_now(screened=Screened(members))
                continue
            digest = await queries.join_digest(
                own,
                digest_key=f"{key}:{int(window)}:{','.join(members)}" if split else key,
                user_id=send.recipient_user_id,
                account_id=send.account_id,
                event_type=definition.type,
                channels=members if split else None,
            )
            await queries.add_digest_item(
                own,
                # One item per digest the send joins; the same on a re-run.
                digest_id=digest["id"],
                item_id=item_ids[window],
                payload=payload,
                send_sequence=send.send_sequence,
            )
            if digest["created"]:
                await services.jobs.enqueue(
                    own, DIGEST_KIND, {"digestId": str(digest["id"])}, delay_seconds=window
                )
            if outcome is None:
                outcome = SendOutcome(notification_id=digest["id"], status="digested")
    assert outcome is not None
    return outcome


async def _screen_digested(
    conn: Conn,
    definition: EventDefinition,
    recipient: str,
    model: BaseModel,
    dedup: tuple[str, int] | None,
) -> Literal["pass", "duplicate", "throttled"]:
    """Throttle count, then dedup claim: the instant path's order (its dispatch statement
    counts the throttle before it claims the dedup key), so a send counts the same either way."""
    over = False
    if definition.throttle is not None:
        sent = await queries.count_throttled(
            conn,
            key=f"{definition.type}:{definition.throttle.key(recipient, model)}",
            window_seconds=int(definition.throttle.window_seconds),
        )
        over = sent > int(definition.throttle.limit)
    if dedup is not None and not await queries.claim_dedup(
        conn, key=dedup[0], window_seconds=dedup[1]
    ):
        return "duplicate"
    return "throttled" if over else "pass"


async def _locale_for(
    services: Notifications,
    conn: Conn | None,
    function: Callable[..., Any],
    user_id: uuid.UUID,
) -> str | None:
    """The recipient's locale, read only for a render function that takes one."""
    if not wants_locale(function):
        return None
    async with _using(services, conn, transaction=False) as own:
        return await queries.user_locale(own, user_id=user_id)


def digest_content(
    definition: EventDefinition,
    recipient: str,
    payloads: list[dict[str, Any]],
    *,
    limit: int,
    locale: str | None = None,
) -> InAppContent:
    """A digest's in-app content: the latest item's, titled with the count, the body listing
    the first `limit` items' titles."""
    assert definition.in_app is not None
    contents = [
        render(definition.in_app, recipient, validate_payload(definition, p), locale)
        for p in payloads
    ]
    latest: InAppContent = contents[-1]
    if len(contents) == 1:
        return latest
    shown = contents[:limit]
    body = "\n".join(content.title for content in shown)
    if len(contents) > len(shown):
        body += f"\n... and {len(contents) - len(shown)} more"
    return InAppContent(
        title=f"{len(contents)} new: {latest.title}",
        body=body,
        cta_url=latest.cta_url,
        cta_label=latest.cta_label,
    )


async def flush_digest(services: Notifications, *, digest_id: uuid.UUID) -> uuid.UUID | None:
    """The window closed: one notification (its id is the digest's) with one delivery row per
    channel, carrying the batched items in its payload under `_digest`."""
    async with services.db.transaction() as conn:
        digest = await queries.close_digest(conn, digest_id)
        if digest is None:
            return None  # flushed by an earlier run
        items = [row["payload"] for row in await queries.digest_items(conn, digest_id)]
        if not items:
            return None
        definition = services.registry.get(digest["event_type"]).definition
        assert definition.digest is not None
        limit = int(definition.digest.max_items)
        recipient = str(digest["user_id"])
        assert definition.in_app is not None
        locale = await _locale_for(services, conn, definition.in_app, digest["user_id"])
        content = digest_content(definition, recipient, items, limit=limit, locale=locale)
        payload = {**items[-1], "_digest": {"count": len(items), "items": items[:limit]}}
        row = await queries.persist_dispatch(
            conn,
            queries.NewNotification(
                notification_id=digest_id,
                user_id=digest["user_id"],
                account_id=digest["account_id"],
                event_type=definition.type,
                title=content.title,
                body=content.body,
                cta_url=content.cta_url,
                cta_label=content.cta_label,
                payload=payload,
                dedup_key=None,
                window_seconds=0,
                channels=[
                    channel
                    for channel in live_channels(services.settings, definition.default_channels)
                    if digest["channels"] is None or channel in digest["channels"]
                ],
            ),
        )
        for channel in row["pending"] if row["id"] is not None else []:
            await services.jobs.enqueue(
                conn, FOLLOW_UP_KINDS[channel], {"notificationId": str(digest_id)}
            )
    return digest_id
