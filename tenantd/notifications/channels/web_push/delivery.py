"""Web push delivery: one job per notification, sent to every live subscription of the user.

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
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from tenantd.db import Row
from tenantd.notifications import queries
from tenantd.notifications.channels import delivery_job, settle_delivery
from tenantd.notifications.channels.web_push.hosts import endpoint_problem
from tenantd.notifications.channels.web_push.vapid import signer
from tenantd.notifications.schemas import envelope, notification_json
from tenantd.notifications.settings import NotificationSettings

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications

log = logging.getLogger(__name__)

CHANNEL = "web_push"
EXPIRED_EVENT = "notifications.web_push.subscription_expired"
PUSH_TTL_SECONDS = 24 * 3600
# RFC 8291: one aes128gcm record of a 4096-byte message holds 4096 - 86 (salt, record size,
# key id = our 65-byte public key) - 16 (tag) - 1 (padding delimiter) bytes of plaintext.
MAX_PUSH_PLAINTEXT = 4096 - 86 - 16 - 1
# Shortened in this order when the envelope is too big; the CTA URL is dropped, never cut.
SHORTENED_FIELDS = ("body", "title", "ctaLabel")


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


@dataclass(frozen=True)
class PushResult:
    subscription_id: uuid.UUID
    outcome: str  # accepted | expired | error
    detail: str = ""


async def push_one(
    services: Notifications,
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
            timeout=aiohttp.ClientTimeout(
                total=settings.section(NotificationSettings).web_push_timeout_seconds
            ),
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


@delivery_job(CHANNEL)
async def run_web_push_job(services: Notifications, notification_id: uuid.UUID, row: Row) -> None:
    """One delivery job per notification: parallel sends to every live subscription."""
    async with services.db.connection() as conn:
        subscriptions = await queries.live_subscriptions(conn, user_id=row["user_id"])
    if not services.settings.section(NotificationSettings).web_push_enabled:
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
