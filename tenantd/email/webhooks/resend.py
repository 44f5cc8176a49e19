"""Provider B, Resend: webhooks signed the Svix way.

Headers `svix-id`, `svix-timestamp` (unix seconds) and `svix-signature` (space-separated
`v1,<base64>` entries). The signature is HMAC-SHA256 over `{id}.{timestamp}.{raw body}`, keyed
with the base64-decoded part of the `whsec_...` secret. Tolerance: 5 minutes either way.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import orjson

from tenantd.addresses import is_plausible, normalize_email
from tenantd.db import Database
from tenantd.email.webhooks.ingest import MAX_EVENT_ID, Outcome, ProviderEvent, apply_events
from tenantd.errors import Unauthorized, ValidationFailed

log = logging.getLogger(__name__)

PROVIDER = "resend"
TOLERANCE_SECONDS = 5 * 60
SECRET_PREFIX = "whsec_"
REASONS = {"email.bounced": "hard_bounce", "email.complained": "complaint"}

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_MESSAGE_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_EVENT_ID}}}")


def refused(why: str) -> Unauthorized:
    # The cause goes to the log (never the secret or the signature), not to the caller.
    log.warning("webhook signature refused", extra={"provider": PROVIDER, "cause": why})
    return Unauthorized("invalid_signature", "Webhook signature verification failed")


@lru_cache(maxsize=4)
def signing_key(secret: str) -> bytes:
    """The HMAC key: base64-decoded secret, `whsec_` prefix optional (as Svix accepts)."""
    encoded = secret.strip()
    if encoded.startswith(SECRET_PREFIX):
        encoded = encoded[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("RESEND_WEBHOOK_SECRET is not a whsec_<base64> secret") from None
    if not key:
        raise ValueError("RESEND_WEBHOOK_SECRET is empty")
    return key


def digest(secret: str, *, message_id: str, timestamp: str, body: bytes) -> bytes:
    """HMAC-SHA256 over `{id}.{timestamp}.{raw body}`."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return hmac.new(signing_key(secret), signed, hashlib.sha256).digest()


def sign(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    """The `v1,<base64>` signature entry of a delivery (for tools and tests)."""
    mac = digest(secret, message_id=message_id, timestamp=str(timestamp), body=body)
    return "v1," + base64.b64encode(mac).decode()


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, now: float) -> str:
    """Check the Svix headers against the raw body; return the svix-id. 401 on any failure."""
    message_id = headers.get("svix-id", "")
    timestamp = headers.get("svix-timestamp", "")
    signatures = headers.get("svix-signature", "")
    if not (message_id and timestamp and signatures):
        raise refused("missing svix headers")
    if not _MESSAGE_ID.fullmatch(message_id) or not _TIMESTAMP.fullmatch(timestamp):
        raise refused("malformed svix-id or svix-timestamp")
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise refused("timestamp outside the tolerance window")
    expected = digest(secret, message_id=message_id, timestamp=timestamp, body=body)
    matched = False
    for entry in signatures.split(" "):
        version, sep, value = entry.partition(",")
        if version != "v1" or not sep:
            continue  # other schemes (v1a asymmetric) are not configured here
        try:
            candidate = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        # Every entry is compared (no early exit) and each comparison is constant-time.
        matched |= hmac.compare_digest(candidate, expected)
    if not matched:
        raise refused("no matching v1 signature")
    return message_id


def parse_events(body: bytes, *, message_id: str, outcome: Outcome) -> list[ProviderEvent]:
    """The verdicts of one Resend event (one event per delivery)."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValidationFailed({"body": "malformed JSON"}) from None
    if not isinstance(data, dict):
        raise ValidationFailed({"body": "expected a JSON object"})
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
    emails: list[str] = []
    for raw in recipients if isinstance(recipients, list) else []:
        if isinstance(raw, str) and is_plausible(normalize_email(raw)):
            emails.append(normalize_email(raw))
    if not emails:
        outcome.malformed = 1
        log.warning("resend event without recipients", extra={"provider": PROVIDER, "kind": kind})
        return []
    return [ProviderEvent(event_id=message_id, kind=kind, reason=reason, emails=tuple(emails))]


async def receive(
    db: Database,
    *,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
) -> Outcome:
    """Verify, skip a delivery already applied (svix-id), record bounce/complaint verdicts."""
    message_id = verify(secret, headers, body, now=time.time() if now is None else now)
    outcome = Outcome()
    events = parse_events(body, message_id=message_id, outcome=outcome)
    if events:
        async with db.transaction() as conn:
            await apply_events(conn, provider=PROVIDER, events=events, outcome=outcome)
    return outcome
