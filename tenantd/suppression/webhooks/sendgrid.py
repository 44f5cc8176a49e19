"""Provider C, SendGrid: the signed Event Webhook.

Headers `X-Twilio-Email-Event-Webhook-Signature` (base64 DER ECDSA signature) and
`X-Twilio-Email-Event-Webhook-Timestamp` (unix seconds); the signature is ECDSA P-256 over
SHA-256 of `timestamp + raw body`. Tolerance: 10 minutes either way. The body is a JSON array
of events; one unreadable event does not cost the others.

The headers are checked on their own first (`signed_headers`), so a request that could never
verify is refused before its body is read.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

from tenantd.db import Database
from tenantd.email.settings import MailVerdictSettings
from tenantd.suppression.webhooks import ingest

log = logging.getLogger(__name__)

PROVIDER = "sendgrid"
TOLERANCE_SECONDS = 10 * 60
SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
MAX_SIGNATURE = 512  # a DER P-256 signature is at most 72 bytes

refused = partial(ingest.signature_refused, PROVIDER)


@dataclass(frozen=True)
class SignedHeaders:
    """The signature headers of a batch that could verify (checked before the body)."""

    timestamp: str
    signature: bytes  # DER


@lru_cache(maxsize=4)
def public_key(text: str) -> ec.EllipticCurvePublicKey:
    """SENDGRID_WEBHOOK_PUBLIC_KEY: PEM, or SendGrid's bare base64 DER SubjectPublicKeyInfo."""
    value = text.strip().replace("\\n", "\n")  # env files often carry PEM with literal \n
    try:
        if "-----BEGIN" in value:
            key = load_pem_public_key(value.encode())
        else:
            key = load_der_public_key(base64.b64decode("".join(value.split()), validate=True))
    except (ValueError, binascii.Error):
        raise ValueError("SENDGRID_WEBHOOK_PUBLIC_KEY is not a PEM or base64 DER key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("SENDGRID_WEBHOOK_PUBLIC_KEY is not an ECDSA P-256 public key")
    return key


def signed_headers(headers: Mapping[str, str], *, now: float) -> SignedHeaders:
    """Headers present, well-formed, inside the window, a DER signature; else 401."""
    signature = headers.get(SIGNATURE_HEADER, "")
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    if not (signature and timestamp):
        raise refused("missing signature headers")
    if not ingest.TIMESTAMP.fullmatch(timestamp) or len(signature) > MAX_SIGNATURE:
        raise refused("malformed signature headers")
    if ingest.outside_window(timestamp, now=now, tolerance_seconds=TOLERANCE_SECONDS):
        raise refused("timestamp outside the tolerance window")
    try:
        der = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise refused("signature is not base64") from None
    try:
        decode_dss_signature(der)
    except ValueError:
        raise refused("signature is not a DER ECDSA signature") from None
    return SignedHeaders(timestamp=timestamp, signature=der)


def verify_body(key_text: str, signed: SignedHeaders, body: bytes) -> None:
    """Check the signature over timestamp + raw body; 401 when it does not match."""
    try:
        public_key(key_text).verify(
            signed.signature, signed.timestamp.encode() + body, ec.ECDSA(hashes.SHA256())
        )
    except InvalidSignature:
        raise refused("signature does not match") from None


def verify(key_text: str, headers: Mapping[str, str], body: bytes, *, now: float) -> None:
    """Check the headers, then the signature over timestamp + raw body; 401 on any failure."""
    verify_body(key_text, signed_headers(headers, now=now), body)


def event_verdict(event: dict[str, Any]) -> str | None:
    """The suppression reason of one event, or None when it creates nothing."""
    kind = event.get("event")
    if kind == "bounce":
        # `blocked` is SendGrid's soft bounce: it never suppresses.
        return "hard_bounce" if event.get("type") == "bounce" else None
    if kind == "spamreport":
        return "complaint"
    if kind == "dropped":
        return "dropped"
    return None


def parse_events(body: bytes, *, outcome: ingest.Outcome) -> list[ingest.ProviderEvent]:
    """The verdicts in a batch; unreadable events are counted and skipped."""
    data = ingest.delivery(body, list, "expected a JSON array of events")
    outcome.events = len(data)
    events: list[ingest.ProviderEvent] = []
    for item in data:
        if not isinstance(item, dict):
            outcome.malformed += 1
            continue
        reason = event_verdict(item)
        if reason is None:
            outcome.ignored += 1
            continue
        address = ingest.recipient(item.get("email"))
        if address is None:
            outcome.malformed += 1
            continue
        events.append(
            ingest.ProviderEvent(
                event_id=ingest.usable_event_id(item.get("sg_event_id")),
                kind=str(item["event"]),
                reason=reason,
                emails=(address,),
            )
        )
    if outcome.malformed:
        log.warning(
            "sendgrid batch had unreadable events",
            extra={"provider": PROVIDER, "malformed": outcome.malformed},
        )
    return events


async def receive(
    db: Database, *, public_key_text: str, signed: SignedHeaders, body: bytes
) -> ingest.Outcome:
    """Verify a batch, skip events already applied (sg_event_id), record the verdicts."""
    verify_body(public_key_text, signed, body)
    outcome = ingest.Outcome()
    return await ingest.record_events(
        db, parse_events(body, outcome=outcome), outcome, provider=PROVIDER
    )


def receiver(verdicts: MailVerdictSettings, db: Database, _app: web.Application) -> ingest.Receiver:
    """SendGrid's deliveries, once its verification key is configured (else 404)."""
    secret = ingest.configured(verdicts.sendgrid_webhook_public_key)
    return ingest.timestamped(
        signed_headers,
        lambda signed, body: receive(db, public_key_text=secret, signed=signed, body=body),
    )
