"""Provider A, Postmark: bounce and spam-complaint webhooks, authenticated by HTTP Basic auth.

Postmark signs nothing; it sends the credentials written in the webhook URL
(`https://user:password@host/api/v1/webhooks/postmark`) as an `Authorization: Basic` header.
They are compared in constant time with POSTMARK_WEBHOOK_USERNAME / _PASSWORD before the body is
read. One event per delivery:

- `RecordType: Bounce`, `Type: HardBounce` or `BadEmailAddress`: reason `hard_bounce`;
  another bounce type that made Postmark deactivate the address (`Inactive: true`): `inactive`;
  soft bounces and the rest create nothing.
- `RecordType: SpamComplaint`: reason `complaint`.

The event id is `<RecordType>:<ID>`, so a retried delivery is applied once.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Mapping

from aiohttp import web

from tenantd.db import Database
from tenantd.email.settings import MailVerdictSettings
from tenantd.errors import Unauthorized
from tenantd.suppression.webhooks import ingest

log = logging.getLogger(__name__)

PROVIDER = "postmark"
HARD_BOUNCE_TYPES = {"HardBounce", "BadEmailAddress"}
MAX_AUTHORIZATION = 1024


def refused(why: str) -> Unauthorized:
    log.warning("webhook credentials refused", extra={"provider": PROVIDER, "cause": why})
    return Unauthorized("invalid_credentials", "Webhook credentials are missing or wrong")


def basic_authorization(username: str, password: str) -> str:
    """The header value Postmark sends for credentials written into the webhook URL."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def check_credentials(headers: Mapping[str, str], *, username: str, password: str) -> None:
    """`Authorization: Basic` carrying the configured user and password; else 401."""
    header = headers.get("Authorization", "")
    if not header or len(header) > MAX_AUTHORIZATION:
        raise refused("missing or oversized Authorization header")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise refused("not Basic authorization")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise refused("malformed Basic credentials") from None
    expected = f"{username}:{password}".encode()
    if not hmac.compare_digest(decoded, expected):
        raise refused("wrong user or password")


def parse_event(body: bytes, *, outcome: ingest.Outcome) -> list[ingest.ProviderEvent]:
    """The verdict of one Postmark webhook event (or none)."""
    data = ingest.delivery(body, dict)
    outcome.events = 1
    record = data.get("RecordType")
    kind = data.get("Type")
    reason: str | None = None
    if record == "SpamComplaint":
        reason = "complaint"
    elif record == "Bounce" and kind in HARD_BOUNCE_TYPES:
        reason = "hard_bounce"
    elif record == "Bounce" and data.get("Inactive") is True:
        reason = "inactive"
    if reason is None:
        outcome.ignored = 1
        return []
    address = ingest.recipient(data.get("Email"))
    if address is None:
        outcome.malformed = 1
        log.warning("postmark event without a recipient", extra={"provider": PROVIDER})
        return []
    ident = data.get("ID")
    event_id = ingest.usable_event_id(
        f"{record}:{ident}" if isinstance(ident, int | str) and ident != "" else None
    )
    return [
        ingest.ProviderEvent(
            event_id=event_id,
            kind=f"{record}:{kind}" if isinstance(kind, str) else str(record),
            reason=reason,
            emails=(address,),
        )
    ]


async def receive(db: Database, *, body: bytes) -> ingest.Outcome:
    """Record the bounce or complaint verdict of one (authenticated) delivery."""
    outcome = ingest.Outcome()
    return await ingest.record_events(
        db, parse_event(body, outcome=outcome), outcome, provider=PROVIDER
    )


def receiver(verdicts: MailVerdictSettings, db: Database, _app: web.Application) -> ingest.Receiver:
    """Postmark's deliveries, once its Basic credentials are configured (else 404)."""
    username = ingest.configured(verdicts.postmark_webhook_username)
    password = ingest.configured(verdicts.postmark_webhook_password)
    return ingest.Receiver(
        check=lambda headers: check_credentials(headers, username=username, password=password),
        apply=lambda _, body: receive(db, body=body),
        authenticated=True,  # the credentials are in the headers: checked already
    )
