"""Amazon SES bounce and complaint notifications, delivered by Amazon SNS over HTTPS.

Order of checks (the cheap ones before the body is read, see views.take_delivery):
1. headers: `x-amz-sns-message-type` is Notification, SubscriptionConfirmation or
   UnsubscribeConfirmation and `x-amz-sns-topic-arn` is one of SES_SNS_TOPIC_ARNS; else 401;
2. the body's `TopicArn` equals the header, `SigningCertURL` is `https://sns.<region>.
   amazonaws.com/...pem` (any other host, scheme or port: 401, nothing is fetched);
3. the certificate is fetched (and cached) and the signature checked: SignatureVersion 1 is
   RSA PKCS#1 v1.5 over SHA-1, version 2 over SHA-256, of AWS's canonical string;
4. SubscriptionConfirmation: the SubscribeURL (same host rule) is fetched, which confirms the
   subscription; Notification: the SES message inside is read, the SNS MessageId skips
   deliveries applied before, and `Bounce` with `bounceType: Permanent` records `hard_bounce`,
   `Complaint` records `complaint` (provider `ses`). Transient bounces create nothing.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tenantd.db import Database
from tenantd.email.settings import MailVerdictSettings
from tenantd.errors import Unauthorized, ValidationFailed
from tenantd.suppression.webhooks import ingest
from tenantd.web.json import loads_bounded

log = logging.getLogger(__name__)

PROVIDER = "ses"
TYPE_HEADER = "x-amz-sns-message-type"
TOPIC_HEADER = "x-amz-sns-topic-arn"
MESSAGE_TYPES = ("Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation")
NOTIFICATION_KEYS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
CONFIRMATION_KEYS = (
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
)
HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
AMAZON_HOST = re.compile(r"sns\.[a-z0-9-]{1,40}\.amazonaws\.com(\.cn)?")
MAX_CERTIFICATE = 64 * 1024
FETCH_TIMEOUT_SECONDS = 10.0
CACHED_CERTIFICATES = 16

Fetch = Callable[[str], Awaitable[bytes]]


def refused(why: str) -> Unauthorized:
    log.warning("webhook signature refused", extra={"provider": PROVIDER, "cause": why})
    return Unauthorized("invalid_signature", "SNS message signature verification failed")


@dataclass(frozen=True)
class SnsHeaders:
    message_type: str
    topic_arn: str


def signed_headers(headers: Mapping[str, str], *, topics: tuple[str, ...]) -> SnsHeaders:
    """An SNS delivery from a configured topic; anything else 401 before the body is read."""
    message_type = headers.get(TYPE_HEADER, "")
    topic = headers.get(TOPIC_HEADER, "")
    if message_type not in MESSAGE_TYPES:
        raise refused("missing or unknown x-amz-sns-message-type")
    if topic not in topics:
        raise refused("topic not in SES_SNS_TOPIC_ARNS")
    return SnsHeaders(message_type=message_type, topic_arn=topic)


def amazon_url(url: str) -> str:
    """`https://sns.<region>.amazonaws.com/...` on the default port; else 401 (never fetched)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise refused("malformed Amazon URL") from None
    host = parts.hostname or ""
    if (
        parts.scheme != "https"
        or port not in (None, 443)
        or parts.username is not None
        or parts.password is not None
        or not AMAZON_HOST.fullmatch(host)
    ):
        raise refused("URL is not https://sns.<region>.amazonaws.com")
    return url


def string_to_sign(message: Mapping[str, Any]) -> bytes:
    """AWS's canonical form: `key\\nvalue\\n` for the type's keys present, in this order."""
    keys = NOTIFICATION_KEYS if message.get("Type") == "Notification" else CONFIRMATION_KEYS
    lines: list[str] = []
    for key in keys:
        value = message.get(key)
        if value is None:
            if key == "Subject":
                continue
            raise refused(f"missing {key}")
        if not isinstance(value, str):
            raise refused(f"{key} is not a string")
        lines += [key, value]
    return ("\n".join(lines) + "\n").encode()


async def https_fetch(url: str) -> bytes:
    """GET an Amazon URL (already checked); at most MAX_CERTIFICATE bytes; 401 if it fails.
    A client of its own: certificates are cached, so this runs a few times a day."""
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(url, allow_redirects=False) as response,
        ):
            body = await response.content.read(MAX_CERTIFICATE + 1)
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as error:
        raise refused(f"fetching from Amazon failed: {type(error).__name__}") from None
    if status != 200 or len(body) > MAX_CERTIFICATE:
        raise refused(f"Amazon answered {status}")
    return body


class SnsCertificates:
    """Signing certificates by URL (a few, least recently used dropped), fetched by `fetch`."""

    def __init__(self, fetch: Fetch):
        self.fetch = fetch
        self._keys: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()

    async def public_key(self, url: str) -> rsa.RSAPublicKey:
        cached = self._keys.get(amazon_url(url))
        if cached is not None:
            self._keys.move_to_end(url)
            return cached
        pem = await self.fetch(url)
        try:
            certificate = x509.load_pem_x509_certificate(pem)
        except ValueError:
            raise refused("signing certificate is not PEM") from None
        now = datetime.datetime.now(datetime.UTC)
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise refused("signing certificate expired or not yet valid")
        key = certificate.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise refused("signing certificate has no RSA key")
        self._keys[url] = key
        while len(self._keys) > CACHED_CERTIFICATES:
            self._keys.popitem(last=False)
        return key


async def verify(certificates: SnsCertificates, message: Mapping[str, Any]) -> None:
    """The SNS signature of the message, with the certificate from its Amazon URL; else 401."""
    algorithm = HASHES.get(str(message.get("SignatureVersion")))
    if algorithm is None:
        raise refused("unknown SignatureVersion")
    url = message.get("SigningCertURL")
    if not isinstance(url, str):
        raise refused("missing SigningCertURL")
    amazon_url(url)
    canonical = string_to_sign(message)
    encoded = message.get("Signature")
    try:
        signature = base64.b64decode(encoded if isinstance(encoded, str) else "", validate=True)
    except (binascii.Error, ValueError):
        raise refused("malformed Signature") from None
    key = await certificates.public_key(url)
    try:
        key.verify(signature, canonical, padding.PKCS1v15(), algorithm())
    except InvalidSignature:
        raise refused("signature does not match") from None


def _recipients(items: Any, field: str) -> tuple[str, ...]:
    found: list[str] = []
    for item in items if isinstance(items, list) else []:
        raw = item.get(field) if isinstance(item, dict) else None
        address = ingest.recipient(raw)
        if address is not None and address not in found:
            found.append(address)
    return tuple(found)


def ses_events(
    message_id: str, text: str, *, outcome: ingest.Outcome
) -> list[ingest.ProviderEvent]:
    """The verdict of one SES notification (bounce or complaint; event publishing too)."""
    try:
        data: Any = loads_bounded(text)
    except ValidationFailed:  # malformed, or nested too deep
        outcome.malformed = 1
        return []
    if not isinstance(data, dict):
        outcome.malformed = 1
        return []
    kind = data.get("notificationType") or data.get("eventType")
    reason: str | None = None
    emails: tuple[str, ...] = ()
    if kind == "Bounce":
        bounce = data.get("bounce")
        bounce = bounce if isinstance(bounce, dict) else {}
        if bounce.get("bounceType") == "Permanent":
            reason = "hard_bounce"
            emails = _recipients(bounce.get("bouncedRecipients"), "emailAddress")
    elif kind == "Complaint":
        complaint = data.get("complaint")
        complaint = complaint if isinstance(complaint, dict) else {}
        if complaint.get("complaintFeedbackType") != "not-spam":
            reason = "complaint"
            emails = _recipients(complaint.get("complainedRecipients"), "emailAddress")
    if reason is None:
        outcome.ignored = 1
        return []
    if not emails:
        outcome.malformed = 1
        log.warning("ses notification without recipients", extra={"provider": PROVIDER})
        return []
    assert isinstance(kind, str)
    event_id = ingest.usable_event_id(message_id)
    return [ingest.ProviderEvent(event_id=event_id, kind=kind, reason=reason, emails=emails)]


async def receive(
    db: Database,
    *,
    certificates: SnsCertificates,
    signed: SnsHeaders,
    body: bytes,
) -> ingest.Outcome:
    """Verify one SNS delivery, then confirm a subscription or record the SES verdict."""
    message = ingest.delivery(body, dict)
    if message.get("Type") != signed.message_type or message.get("TopicArn") != signed.topic_arn:
        raise refused("body Type or TopicArn differs from the headers")
    await verify(certificates, message)
    outcome = ingest.Outcome(events=1)
    if signed.message_type == "SubscriptionConfirmation":
        url = message.get("SubscribeURL")
        await certificates.fetch(amazon_url(url if isinstance(url, str) else ""))
        log.info("sns subscription confirmed", extra={"provider": PROVIDER})
        outcome.ignored = 1
        return outcome
    if signed.message_type == "UnsubscribeConfirmation":
        log.warning("sns subscription ended", extra={"provider": PROVIDER})
        outcome.ignored = 1
        return outcome
    events = ses_events(str(message.get("MessageId")), str(message.get("Message")), outcome=outcome)
    return await ingest.record_events(db, events, outcome, provider=PROVIDER)


SNS_CERTIFICATES: web.AppKey[SnsCertificates] = web.AppKey("sns_certificates", SnsCertificates)


def receiver(verdicts: MailVerdictSettings, db: Database, app: web.Application) -> ingest.Receiver:
    """Amazon SES's notifications through SNS, once topics are configured (else 404)."""
    topics = ingest.configured(verdicts.ses_sns_topic_arns)
    certificates = app[SNS_CERTIFICATES]
    return ingest.Receiver(
        check=lambda headers: signed_headers(headers, topics=topics),
        apply=lambda signed, body: receive(db, certificates=certificates, signed=signed, body=body),
    )
