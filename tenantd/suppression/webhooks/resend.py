"""Provider B, Resend: webhooks signed the Svix way (Standard Webhooks).

Headers `svix-id`, `svix-timestamp` (unix seconds) and `svix-signature` (space-separated
`v1,<base64>` entries), or the same three named `webhook-id`, `webhook-timestamp` and
`webhook-signature` (Standard Webhooks); like the svix library, each `svix-*` header wins
over its `webhook-*` twin. Tolerance: 5 minutes either way.

The headers are checked on their own first (`signed_headers`), so a request that could never
verify is refused before its body is read; the signature itself is checked by the
`standardwebhooks` library (HMAC-SHA256 over `{id}.{timestamp}.{raw body}`), which also signs
tenantd's own outbound webhooks.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache, partial

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tenantd.db import Database
from tenantd.email.settings import MailVerdictSettings
from tenantd.suppression.webhooks import ingest

log = logging.getLogger(__name__)

PROVIDER = "resend"
TOLERANCE_SECONDS = 5 * 60  # the standardwebhooks library's own tolerance
SECRET_PREFIX = "whsec_"
REASONS = {"email.bounced": "hard_bounce", "email.complained": "complaint"}

HEADER_SETS = (
    ("svix-id", "svix-timestamp", "svix-signature"),
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
)
MAX_SIGNATURES = 4096  # a v1 entry is 47 characters; a few per secret during rotation
SIGNATURE_BYTES = 32  # HMAC-SHA256

_MESSAGE_ID = re.compile(rf"[\x21-\x7e]{{1,{ingest.MAX_EVENT_ID}}}")

refused = partial(ingest.signature_refused, PROVIDER)


@dataclass(frozen=True)
class SignedHeaders:
    """The signature headers of a delivery that could verify (checked before the body)."""

    message_id: str
    timestamp: str
    signatures: tuple[str, ...]  # the well-formed `v1,<base64>` entries


@lru_cache(maxsize=4)
def verifier(secret: str) -> Webhook:
    """The verifier of a `whsec_<base64>` secret (prefix optional, as Svix accepts). The library
    decodes leniently, so a secret that is not base64 is refused here, at start-up."""
    encoded = secret.strip().removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("RESEND_WEBHOOK_SECRET is not a whsec_<base64> secret") from None
    if not key:
        raise ValueError("RESEND_WEBHOOK_SECRET is empty")
    return Webhook(key)


def _header_set(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """Each of id, timestamp and signature: the svix-* header, else its webhook-* twin (as the
    svix library reads them)."""
    svix_names, standard_names = HEADER_SETS
    values = [
        headers.get(svix, "") or headers.get(standard, "")
        for svix, standard in zip(svix_names, standard_names, strict=True)
    ]
    if not all(values):
        raise refused("missing svix-* or webhook-* headers")
    return values[0], values[1], values[2]


def _v1_entries(signatures: str) -> tuple[str, ...]:
    """The entries the library can compare: other schemes (v1a, asymmetric) are not configured
    here, and a malformed entry would make it raise instead of refusing."""
    entries: list[str] = []
    for entry in signatures.split(" "):
        version, sep, value = entry.partition(",")
        if version != "v1" or not sep:
            continue
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(decoded) == SIGNATURE_BYTES:
            entries.append(entry)
    return tuple(entries)


def signed_headers(headers: Mapping[str, str], *, now: float) -> SignedHeaders:
    """Headers present, well-formed, inside the window and carrying a v1 entry; else 401."""
    message_id, timestamp, signatures = _header_set(headers)
    if not _MESSAGE_ID.fullmatch(message_id) or not ingest.TIMESTAMP.fullmatch(timestamp):
        raise refused("malformed message id or timestamp")
    if ingest.outside_window(timestamp, now=now, tolerance_seconds=TOLERANCE_SECONDS):
        raise refused("timestamp outside the tolerance window")
    if len(signatures) > MAX_SIGNATURES:
        raise refused("signature header too long")
    entries = _v1_entries(signatures)
    if not entries:
        raise refused("no well-formed v1 signature")
    return SignedHeaders(message_id=message_id, timestamp=timestamp, signatures=entries)


def verify_body(secret: str, signed: SignedHeaders, body: bytes) -> str:
    """Check the raw body against the signature entries; return the message id. 401 if none."""
    standard = {
        "webhook-id": signed.message_id,
        "webhook-timestamp": signed.timestamp,
        "webhook-signature": " ".join(signed.signatures),
    }
    try:
        verifier(secret).verify(body, standard, json_parse=False)
    except WebhookVerificationError:
        raise refused("no matching v1 signature") from None
    except UnicodeDecodeError:  # the library signs text; JSON is UTF-8 anyway
        raise refused("body is not UTF-8") from None
    return signed.message_id


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, now: float) -> str:
    """Check the headers, then the raw body; return the message id. 401 on any failure."""
    return verify_body(secret, signed_headers(headers, now=now), body)


def parse_events(
    body: bytes, *, message_id: str, outcome: ingest.Outcome
) -> list[ingest.ProviderEvent]:
    """The verdicts of one Resend event (one event per delivery)."""
    data = ingest.delivery(body, dict)
    outcome.events = 1
    kind = data.get("type")
    reason = REASONS.get(kind) if isinstance(kind, str) else None
    if reason is None:
        outcome.ignored = 1
        return []
    assert isinstance(kind, str)
    payload = data.get("data")
    recipients = payload.get("to") if isinstance(payload, dict) else None
    if isinstance(recipients, str):
        recipients = [recipients]
    found = (ingest.recipient(raw) for raw in recipients) if isinstance(recipients, list) else ()
    emails = [address for address in found if address is not None]
    if not emails:
        outcome.malformed = 1
        log.warning("resend event without recipients", extra={"provider": PROVIDER, "kind": kind})
        return []
    return [
        ingest.ProviderEvent(event_id=message_id, kind=kind, reason=reason, emails=tuple(emails))
    ]


async def receive(
    db: Database, *, secret: str, signed: SignedHeaders, body: bytes
) -> ingest.Outcome:
    """Verify, skip a delivery already applied (message id), record bounce/complaint verdicts."""
    message_id = verify_body(secret, signed, body)
    outcome = ingest.Outcome()
    events = parse_events(body, message_id=message_id, outcome=outcome)
    return await ingest.record_events(db, events, outcome, provider=PROVIDER)


def receiver(verdicts: MailVerdictSettings, db: Database, _app: web.Application) -> ingest.Receiver:
    """Resend's deliveries, once a signing secret is configured (else 404)."""
    secret = ingest.configured(verdicts.resend_webhook_secret)
    return ingest.timestamped(
        signed_headers, lambda signed, body: receive(db, secret=secret, signed=signed, body=body)
    )
