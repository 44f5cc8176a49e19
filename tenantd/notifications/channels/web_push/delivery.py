"""Web push channel (exists only when all three WEB_PUSH_VAPID_* variables are set).

Subscriptions are validated before they are stored: the endpoint must be https on a host of
WEB_PUSH_ALLOWED_HOSTS (exact names, `*.suffix` wildcards; an IP literal only when listed
itself; an entry `http://host:port` allows plain http to exactly that host and port), and
the keys must be a P-256 point (65 bytes) and a 16-byte auth secret, base64url.

Delivery encrypts the envelope with pywebpush (aes128gcm) and signs VAPID with py_vapid, but
sends the request itself: aiohttp, redirects never followed, a timeout per send, every
subscription of the user in parallel. Any accepted -> `sent`; 404/410 delete the subscription
(logged as notifications.web_push.subscription_expired); nothing accepted and some error ->
`failed`; no live subscription -> `suppressed`.

A push message is kept within 4096 bytes (RFC 8030 obliges push services to accept only that
much; the big ones answer 413 beyond it): an envelope too big for it goes out with the body
cut short and `"truncated": true`, and the client fetches the whole notification by its id.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import ipaddress
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.db import Conn, Row
from tenantd.errors import NotFound, ValidationFailed
from tenantd.jobs.kinds import JobInfo
from tenantd.notifications import queries
from tenantd.notifications.channels import settle_delivery
from tenantd.notifications.schemas import envelope, notification_json, subscription_json
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.notifications.services import NotificationServices

log = logging.getLogger(__name__)

CHANNEL = "web_push"
EXPIRED_EVENT = "notifications.web_push.subscription_expired"
PUSH_TTL_SECONDS = 24 * 3600
DEFAULT_SEND_TIMEOUT = 10.0
VAPID_TOKEN_SECONDS = 12 * 3600
VAPID_REUSE_SECONDS = 3600
VAPID_AUDIENCES_CACHED = 256  # signed headers kept, one per push service origin (LRU)
SIGNERS_CACHED = 4  # VAPID key pairs kept (one in production; tests build several)
# RFC 8291: one aes128gcm record of a 4096-byte message holds 4096 - 86 (salt, record size,
# key id = our 65-byte public key) - 16 (tag) - 1 (padding delimiter) bytes of plaintext.
MAX_PUSH_PLAINTEXT = 4096 - 86 - 16 - 1
# Shortened in this order when the envelope is too big; the CTA URL is dropped, never cut.
SHORTENED_FIELDS = ("body", "title", "ctaLabel")


# --- endpoint policy ----------------------------------------------------------------------


@dataclass(frozen=True)
class HostRule:
    scheme: str  # "https" or "http"
    host: str  # lower-case; "*.example.com" for a wildcard
    port: int | None  # None: the scheme's default port only

    def matches(self, scheme: str, host: str, port: int | None) -> bool:
        if scheme != self.scheme:
            return False
        default = 443 if scheme == "https" else 80
        if (port or default) != (self.port or default):
            return False
        if self.host.startswith("*."):
            suffix = self.host[1:]  # ".push.apple.com": a subdomain, never the bare suffix
            return host.endswith(suffix) and len(host) > len(suffix) and not _is_ip(host)
        return host == self.host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def host_rules(entries: tuple[str, ...]) -> list[HostRule]:
    rules = []
    for entry in entries:
        entry = entry.strip().lower()
        if not entry:
            continue
        if "://" in entry:
            parts = urlsplit(entry)
            if parts.scheme not in {"http", "https"} or not parts.hostname:
                continue
            rules.append(HostRule(parts.scheme, parts.hostname, parts.port))
        else:
            rules.append(HostRule("https", entry, None))
    return rules


def endpoint_problem(settings: Settings, endpoint: str) -> str | None:
    """Why this endpoint may not be contacted (SSRF policy), or None when it may."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        return "endpoint is not a valid URL"
    scheme = (parts.scheme or "").lower()
    host = (parts.hostname or "").lower()
    if scheme not in {"https", "http"} or not host:
        return "endpoint must be an https URL"
    if parts.username is not None or parts.password is not None:
        return "endpoint must not carry credentials"
    if any(ord(ch) < 33 for ch in endpoint):
        return "endpoint must not contain spaces or control characters"
    for rule in host_rules(settings.web_push_allowed_hosts):
        if rule.matches(scheme, host, port):
            return None
    if scheme != "https":
        return "endpoint must be an https URL"
    if _is_ip(host):
        return "endpoint host must not be an IP address"
    return "endpoint host is not an allowed push service"


def _b64url(value: str) -> bytes:
    if not value or any(ch not in _B64URL for ch in value.rstrip("=")):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))


_B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def check_subscription(settings: Settings, endpoint: str, p256dh: str, auth: str) -> None:
    """SSRF policy for the endpoint and the key formats; 422 naming the bad fields."""
    fields: dict[str, str] = {}
    problem = endpoint_problem(settings, endpoint)
    if problem:
        fields["endpoint"] = problem
    try:
        point = _b64url(p256dh)
        if len(point) != 65 or point[0] != 4:
            raise ValueError("length")
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    except (ValueError, binascii.Error):
        fields["keys.p256dh"] = "must be a base64url uncompressed P-256 point (65 bytes)"
    try:
        if len(_b64url(auth)) != 16:
            raise ValueError("length")
    except (ValueError, binascii.Error):
        fields["keys.auth"] = "must be a base64url 16-byte secret"
    if fields:
        raise ValidationFailed(fields)


def require_push(settings: Settings) -> None:
    if not settings.web_push_enabled:
        raise NotFound("Web push is not enabled")


# --- VAPID --------------------------------------------------------------------------------


class VapidSigner:
    """VAPID (RFC 8292) Authorization headers, re-signed per push service every hour."""

    def __init__(self, private_key: str, subject: str):
        # Imported here: pywebpush brings requests and urllib3 (~5 MB of resident memory),
        # which an instance without web push configured never needs.
        from py_vapid import Vapid02  # noqa: PLC0415 (memory: only with web push on)

        key = private_key.strip()
        if "-----BEGIN" in key:
            self.vapid = Vapid02.from_pem(key.encode())
        else:
            self.vapid = Vapid02.from_string(key)
        self.subject = subject
        # Keyed by audience: bounded, since subscriptions choose the hosts (within the policy).
        self._cache: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()

    def headers(self, endpoint: str) -> dict[str, str]:
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        cached = self._cache.get(audience)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(audience)
            return cached[1]
        signed = self.vapid.sign(
            {"sub": self.subject, "aud": audience, "exp": int(now) + VAPID_TOKEN_SECONDS}
        )
        self._cache[audience] = (now + VAPID_REUSE_SECONDS, signed)
        self._cache.move_to_end(audience)
        while len(self._cache) > VAPID_AUDIENCES_CACHED:
            self._cache.popitem(last=False)
        return signed


_SIGNERS: OrderedDict[tuple[str, str], VapidSigner] = OrderedDict()


def signer(settings: Settings) -> VapidSigner:
    assert settings.vapid_private_key and settings.vapid_subject
    key = (settings.vapid_private_key, settings.vapid_subject)
    found = _SIGNERS.get(key)
    if found is None:
        found = VapidSigner(settings.vapid_private_key, settings.vapid_subject)
        _SIGNERS[key] = found
        while len(_SIGNERS) > SIGNERS_CACHED:
            _SIGNERS.popitem(last=False)
    _SIGNERS.move_to_end(key)
    return found


def send_timeout(settings: Settings) -> float:
    raw = settings.extra.get("TENANTD_WEB_PUSH_TIMEOUT_SECONDS", "").strip()
    try:
        return float(raw) if raw else DEFAULT_SEND_TIMEOUT
    except ValueError:
        return DEFAULT_SEND_TIMEOUT


# --- message size -------------------------------------------------------------------------


def _encoded(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message, option=orjson.OPT_UTC_Z)


def push_message(row: Row) -> bytes:
    """The envelope as push plaintext: whole when it fits one 4096-byte message, otherwise
    with the body (then title, CTA label) cut to a prefix and `"truncated": true`."""
    data = envelope(row)
    if len(data) <= MAX_PUSH_PLAINTEXT:
        return data
    notification = notification_json(row)
    message: dict[str, Any] = {
        "type": "notification.created",
        "notification": notification,
        "truncated": True,
    }
    for name in SHORTENED_FIELDS:
        if _shorten(message, notification, name):
            return _encoded(message)
    notification["ctaUrl"] = ""  # a cut URL would lead somewhere else
    data = _encoded(message)
    if len(data) <= MAX_PUSH_PLAINTEXT:
        return data
    # Only an absurd event type gets here: the id alone still lets the client fetch it.
    return _encoded({**message, "notification": {"id": notification["id"]}})


def _shorten(message: dict[str, Any], notification: dict[str, Any], name: str) -> bool:
    """Cut notification[name] to the longest prefix that fits; False if even "" does not."""
    text: str = notification[name]

    def fits(length: int) -> bool:
        notification[name] = text[:length]
        return len(_encoded(message)) <= MAX_PUSH_PLAINTEXT

    if not fits(0):
        return False
    # Every character costs at least one byte, so no longer prefix can fit.
    low, high = 0, min(len(text), MAX_PUSH_PLAINTEXT)
    while low < high:  # binary search: escapes and multi-byte characters vary in size
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    notification[name] = text[:low]
    return True


# --- delivery -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    subscription_id: uuid.UUID
    outcome: str  # accepted | expired | error
    detail: str = ""


async def push_one(
    services: NotificationServices,
    subscription: dict[str, Any],
    data: bytes,
    *,
    urgency: str = "normal",
) -> PushResult:
    """Encrypt and POST one message; never follows a redirect."""
    settings = services.settings
    sub_id = subscription["id"]
    endpoint = subscription["endpoint"]
    problem = endpoint_problem(settings, endpoint)
    if problem:
        return PushResult(sub_id, "error", "endpoint_not_allowed")
    from pywebpush import WebPusher  # noqa: PLC0415 (see VapidSigner)

    try:
        pusher = WebPusher(
            {
                "endpoint": endpoint,
                "keys": {"p256dh": subscription["p256dh_key"], "auth": subscription["auth_key"]},
            }
        )
        body = pusher.encode(data, content_encoding="aes128gcm")["body"]
        headers = {
            **signer(settings).headers(endpoint),
            "TTL": str(PUSH_TTL_SECONDS),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "Urgency": urgency,
        }
    except Exception as error:
        return PushResult(sub_id, "error", f"encrypt: {type(error).__name__}")
    try:
        async with services.http.post(
            endpoint,
            data=body,
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=send_timeout(settings)),
        ) as response:
            status = response.status
            await response.read()
    except TimeoutError:
        return PushResult(sub_id, "error", "timeout")
    except aiohttp.ClientError as error:
        return PushResult(sub_id, "error", f"connection: {type(error).__name__}")
    if status in (200, 201, 202):
        return PushResult(sub_id, "accepted")
    if status in (404, 410):
        return PushResult(sub_id, "expired", f"http_{status}")
    return PushResult(sub_id, "error", f"http_{status}")


async def run_web_push_job(
    services: NotificationServices, payload: dict[str, Any], job: JobInfo
) -> None:
    """One delivery job per notification: parallel sends to every live subscription."""
    notification_id = uuid.UUID(str(payload["notificationId"]))
    async with services.db.connection() as conn:
        row = await queries.delivery_context(conn, notification_id=notification_id, channel=CHANNEL)
        if row is None or row["delivery_status"] != "pending":
            return
        subscriptions = await queries.live_subscriptions(conn, user_id=row["user_id"])
    if not services.settings.web_push_enabled:
        await settle_delivery(services, notification_id, CHANNEL, "suppressed", "web_push_disabled")
        return
    if not subscriptions:
        await settle_delivery(services, notification_id, CHANNEL, "suppressed", "no_subscriptions")
        return
    data = push_message(row)
    results = await asyncio.gather(*(push_one(services, sub, data) for sub in subscriptions))
    accepted = [r.subscription_id for r in results if r.outcome == "accepted"]
    expired = [r for r in results if r.outcome == "expired"]
    errors = [r for r in results if r.outcome == "error"]
    async with services.db.connection() as conn:
        if expired:
            await queries.delete_subscriptions(conn, ids=[r.subscription_id for r in expired])
        if accepted:
            await queries.touch_subscriptions(conn, ids=accepted)
    for result in expired:
        log.info(
            EXPIRED_EVENT,
            extra={
                "event": EXPIRED_EVENT,
                "subscription_id": str(result.subscription_id),
                "user_id": str(row["user_id"]),
                "status": result.detail,
            },
        )
    if accepted:
        await settle_delivery(services, notification_id, CHANNEL, "sent")
    elif errors:
        await settle_delivery(services, notification_id, CHANNEL, "failed", errors[0].detail[:200])
    else:
        await settle_delivery(
            services, notification_id, CHANNEL, "suppressed", "no_live_subscriptions"
        )


# --- subscriptions ------------------------------------------------------------------------


async def subscribe(
    conn: Conn,
    *,
    settings: Settings,
    user_id: uuid.UUID,
    endpoint: str,
    p256dh: str,
    auth: str,
    expiration_ms: float | None,
    user_agent: str | None,
) -> dict[str, Any]:
    """Validate (SSRF policy, key formats) and upsert on (user, endpoint); keys rotate; over
    WEB_PUSH_MAX_SUBSCRIPTIONS_PER_USER the user's oldest subscription is replaced."""
    require_push(settings)
    check_subscription(settings, endpoint, p256dh, auth)
    expires_at = None
    if expiration_ms is not None:
        try:
            expires_at = dt.datetime.fromtimestamp(expiration_ms / 1000, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise ValidationFailed({"expirationTime": "not a valid timestamp"}) from None
    async with conn.transaction():
        await queries.lock_push_subscriptions(conn, user_id=user_id)
        row = await queries.upsert_subscription(
            conn,
            user_id=user_id,
            endpoint=endpoint,
            p256dh=p256dh,
            auth=auth,
            user_agent=(user_agent or "")[:512] or None,
            expires_at=expires_at,
            keep_at_most=settings.web_push_max_subscriptions_per_user,
        )
    return subscription_json(row)


async def unsubscribe(
    conn: Any, *, settings: Settings, user_id: uuid.UUID, endpoint: str
) -> dict[str, bool]:
    require_push(settings)
    removed = await queries.delete_subscription(conn, user_id=user_id, endpoint=endpoint)
    return {"removed": removed > 0}


async def subscriptions(
    conn: Any, *, settings: Settings, user_id: uuid.UUID
) -> list[dict[str, Any]]:
    require_push(settings)
    return [
        subscription_json(row) for row in await queries.list_subscriptions(conn, user_id=user_id)
    ]


def public_key(settings: Settings) -> dict[str, str]:
    require_push(settings)
    assert settings.vapid_public_key
    return {"publicKey": settings.vapid_public_key}
