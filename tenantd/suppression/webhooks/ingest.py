"""Apply verified provider events: skip event ids already seen, then record verdicts.

A batch costs two statements whatever its size: one multi-row insert into webhook_events
(returning the ids not seen before) and one multi-row insert into email_suppressions.
Both insert in sorted order, so concurrent batches take row locks in the same order.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from tenantd.addresses import is_plausible, normalize_email
from tenantd.db import Conn, Database
from tenantd.errors import NotFound, Unauthorized, ValidationFailed
from tenantd.suppression import queries
from tenantd.suppression import service as suppression
from tenantd.web.json import loads_bounded

T = TypeVar("T")
J = TypeVar("J", dict[str, Any], list[Any])
log = logging.getLogger(__name__)

MAX_EVENT_ID = 256
TIMESTAMP = re.compile(r"[0-9]{1,12}")  # a signature header's unix seconds


def usable_event_id(value: object) -> str | None:
    """A provider's event id as stored for deduplication, or None when it cannot be one
    (not a string, empty, too long, or holding NUL, which PostgreSQL text cannot store);
    an event without one is still applied."""
    if isinstance(value, str) and value and len(value) <= MAX_EVENT_ID and "\x00" not in value:
        return value
    return None


def delivery(body: bytes, shape: type[J], refusal: str = "expected a JSON object") -> J:
    """A delivery's JSON body, a `shape` (object or array); 422 when malformed, nested too
    deep or of another shape."""
    data: Any = loads_bounded(body)
    if not isinstance(data, shape):
        raise ValidationFailed({"body": refusal})
    return data


def recipient(raw: object) -> str | None:
    """An event's address as suppressions store it, or None when it is not a plausible one."""
    address = normalize_email(raw) if isinstance(raw, str) else ""
    return address if is_plausible(address) else None


@dataclass(frozen=True)
class ProviderEvent:
    """One provider event that carries a verdict for its addresses."""

    event_id: str | None  # svix-id, sg_event_id; None: cannot be deduplicated, still applied
    kind: str  # the provider's event name
    reason: str
    emails: tuple[str, ...]


@dataclass
class Outcome:
    events: int = 0  # events in the delivery
    recorded: int = 0  # suppression rows inserted
    duplicates: int = 0  # events whose id was already applied
    ignored: int = 0  # events of kinds that create nothing (soft bounces, opens, ...)
    malformed: int = 0  # events that could not be read

    def as_json(self) -> dict[str, int]:
        return {
            "events": self.events,
            "recorded": self.recorded,
            "duplicates": self.duplicates,
            "ignored": self.ignored,
            "malformed": self.malformed,
        }


async def claim_event_ids(conn: Conn, *, provider: str, event_ids: Sequence[str]) -> set[str]:
    """Insert the ids; return those not seen before (a retried delivery returns none)."""
    if not event_ids:
        return set()
    fresh = await conn.fetch_val(
        queries.CLAIM_EVENT_IDS,
        {"provider": provider, "ids": orjson.dumps(sorted(event_ids)).decode()},
    )
    return set(fresh)


async def apply_events(
    conn: Conn, *, provider: str, events: Sequence[ProviderEvent], outcome: Outcome
) -> None:
    """Record the verdicts of events not applied before; the caller owns the transaction."""
    unique: list[ProviderEvent] = []
    seen: set[str] = set()
    for event in events:
        if event.event_id is not None:
            if event.event_id in seen:
                outcome.duplicates += 1
                continue
            seen.add(event.event_id)
        unique.append(event)
    fresh = await claim_event_ids(conn, provider=provider, event_ids=sorted(seen))
    apply = [e for e in unique if e.event_id is None or e.event_id in fresh]
    outcome.duplicates += len(unique) - len(apply)
    verdicts = [
        (email, event.reason, {"event": event.kind, "eventId": event.event_id})
        for event in apply
        for email in event.emails
    ]
    recorded = await suppression.add_many(conn, verdicts, provider=provider)
    outcome.recorded += len(recorded)
    if not log.isEnabledFor(logging.INFO):
        return  # no log record fields built for rows nobody logs
    for row in recorded:
        log.info(
            "email suppression recorded",
            extra={"provider": provider, "reason": row["reason"], "email": row["email"]},
        )


async def record_events(
    db: Database, events: Sequence[ProviderEvent], outcome: Outcome, *, provider: str
) -> Outcome:
    """Apply a delivery's events (none: no transaction) and return its `outcome`."""
    if events:
        async with db.transaction() as conn:
            await apply_events(conn, provider=provider, events=events, outcome=outcome)
    return outcome


@dataclass(frozen=True)
class Receiver:
    """How one provider's deliveries are taken: `check` its headers (before the body is
    read), then `apply` the body, verified as it came. `authenticated`: `check` proved the
    sender (not just the headers' form)."""

    check: Callable[[Mapping[str, str]], Any]
    apply: Callable[[Any, bytes], Awaitable[Outcome]]
    authenticated: bool = False


def configured(value: T | None) -> T:
    """A provider's webhook setting; unset (or empty), the webhook is not there (404)."""
    if not value:
        raise NotFound()
    return value


def signature_refused(provider: str, why: str) -> Unauthorized:
    """The 401 of a delivery whose signature does not verify."""
    # The cause goes to the log (never the secret, key or signature), not to the caller.
    log.warning("webhook signature refused", extra={"provider": provider, "cause": why})
    return Unauthorized("invalid_signature", "Webhook signature verification failed")


def outside_window(timestamp: str, *, now: float, tolerance_seconds: int) -> bool:
    """A signed timestamp (TIMESTAMP, checked first) too far from now either way: a replay."""
    return abs(now - int(timestamp)) > tolerance_seconds


def timestamped(
    signed_headers: Callable[..., Any], apply: Callable[[Any, bytes], Awaitable[Outcome]]
) -> Receiver:
    """A provider signing the body with a timestamp: its headers are read against now."""
    return Receiver(check=lambda headers: signed_headers(headers, now=time.time()), apply=apply)
