"""The provider webhooks (Resend, SendGrid, Postmark, Amazon SES through SNS). The raw body
is read once, here, and verified as is.

Order: the signature headers are checked before a byte of the body is read (a request that
could never verify gets 401 at once and its connection is closed, so its body is never
waited for); then the body is read into one of a few slots (TENANTD_WEBHOOK_MAX_BODIES, each
up to 10 MiB, within BODY_READ_SECONDS); a request that waited SLOT_WAIT_SECONDS without a
slot gets 503 with Retry-After (both providers retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.email.webhooks import postmark, resend, sendgrid, ses
from tenantd.email.webhooks.ingest import Outcome
from tenantd.errors import AppError, NotFound, Unauthorized
from tenantd.settings import SETTINGS, Settings, env_int
from tenantd.web.body import read_limited
from tenantd.web.json import error_response
from tenantd.web.middlewares import REQUEST_ID
from tenantd.web.schemas import ApiModel
from tenantd.web.spec import CURRENT_ROUTE, Access, Routes

ROUTES = Routes("webhooks")

RESPONSES = {
    401: "Signature, timestamp or headers invalid (refused before the body is read)",
    404: "Webhook not configured",
    408: "The body did not arrive in time",
    503: "Too many webhook bodies in flight; retry after Retry-After seconds",
}

DEFAULT_MAX_BODIES = 8  # x 10 MiB: the most webhook bodies held in memory at once
SLOT_WAIT_SECONDS = 10.0  # a burst waits this long for a slot, then gets 503
BODY_READ_SECONDS = 60.0  # a slow sender never holds a slot longer
BUSY_RETRY_AFTER = 5

Signed = TypeVar("Signed")


class WebhooksBusy(AppError):
    status = 503
    code = "SERVICE_UNAVAILABLE"
    message = "Too many webhook deliveries at once; retry later"
    retry_after = BUSY_RETRY_AFTER


class BodyTimeout(AppError):
    status = 408
    code = "REQUEST_TIMEOUT"
    message = "The request body did not arrive in time"


class BodyGate:
    """At most `limit` webhook bodies read or held at once, so they never take more than
    limit x 10 MiB. A request waits up to `wait` seconds for a slot (meanwhile its body stays
    unread: aiohttp stops reading the socket after 128 KiB); a slot is held for the read
    (at most `read_seconds`) and the processing."""

    def __init__(
        self,
        limit: int,
        *,
        wait: float = SLOT_WAIT_SECONDS,
        read_seconds: float = BODY_READ_SECONDS,
    ):
        self.limit = limit
        self.wait = wait
        self.read_seconds = read_seconds
        self.held = 0
        self.waiting = 0
        self._slots = asyncio.Semaphore(limit)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            async with asyncio.timeout(self.wait):
                await self._slots.acquire()
        except TimeoutError:
            raise WebhooksBusy() from None
        finally:
            self.waiting -= 1
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
            self._slots.release()


def max_bodies(settings: Settings) -> int:
    return env_int(settings.extra, "TENANTD_WEBHOOK_MAX_BODIES", DEFAULT_MAX_BODIES, minimum=1)


_GATES: weakref.WeakKeyDictionary[web.Application, BodyGate] = weakref.WeakKeyDictionary()


def body_gate(app: web.Application) -> BodyGate:
    """The process-wide gate of this application (created on first use)."""
    gate = _GATES.get(app)
    if gate is None:
        gate = _GATES[app] = BodyGate(max_bodies(app[SETTINGS]))
    return gate


async def closing(request: web.Request, error: AppError) -> web.Response:
    """Send the error answer, then close the connection at once: an unread body is never
    waited for (aiohttp would otherwise read and discard it for up to 10 s first)."""
    response = error_response(error, request_id=request[REQUEST_ID])
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the transport flushes the answer, then closes
    return response


async def take_delivery(
    request: web.Request,
    *,
    check: Callable[[Mapping[str, str]], Signed],
    apply: Callable[[Signed, bytes], Awaitable[Outcome]],
) -> dict[str, int] | web.Response:
    """Headers first (401 with the body unread), then the body in a slot, then verify and apply."""
    try:
        signed = check(request.headers)
    except Unauthorized as refused:
        return await closing(request, refused)
    gate = body_gate(request.app)
    try:
        async with gate.slot():
            try:
                async with asyncio.timeout(gate.read_seconds):
                    body = await read_limited(request, request[CURRENT_ROUTE].body_limit)
            except TimeoutError:
                return await closing(request, BodyTimeout())
            outcome = await apply(signed, body)
    except WebhooksBusy as busy:
        return await closing(request, busy)
    return outcome.as_json()


class WebhookReceipt(ApiModel):
    events: int
    recorded: int
    duplicates: int
    ignored: int
    malformed: int


@ROUTES.post(
    "/api/v1/webhooks/resend",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="Resend (Svix / Standard Webhooks signed) email.bounced / email.complained events",
)
async def resend_webhook(request: web.Request) -> dict[str, int] | web.Response:
    secret = request.app[SETTINGS].resend_webhook_secret
    db = request.app[DATABASE]
    if not secret:
        raise NotFound()
    return await take_delivery(
        request,
        check=lambda headers: resend.signed_headers(headers, now=time.time()),
        apply=lambda signed, body: resend.receive(db, secret=secret, signed=signed, body=body),
    )


@ROUTES.post(
    "/api/v1/webhooks/sendgrid",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="SendGrid signed Event Webhook batch (bounce, spamreport, dropped)",
)
async def sendgrid_webhook(request: web.Request) -> dict[str, int] | web.Response:
    key = request.app[SETTINGS].sendgrid_webhook_public_key
    db = request.app[DATABASE]
    if not key:
        raise NotFound()
    return await take_delivery(
        request,
        check=lambda headers: sendgrid.signed_headers(headers, now=time.time()),
        apply=lambda signed, body: sendgrid.receive(
            db, public_key_text=key, signed=signed, body=body
        ),
    )


@ROUTES.post(
    "/api/v1/webhooks/postmark",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="Postmark bounce / spam-complaint webhook (HTTP Basic auth from the webhook URL)",
)
async def postmark_webhook(request: web.Request) -> dict[str, int] | web.Response:
    settings = request.app[SETTINGS]
    username, password = settings.postmark_webhook_username, settings.postmark_webhook_password
    db = request.app[DATABASE]
    if not username or not password:
        raise NotFound()
    return await take_delivery(
        request,
        check=lambda headers: postmark.check_credentials(
            headers, username=username, password=password
        ),
        apply=lambda _, body: postmark.receive(db, body=body),
    )


@ROUTES.post(
    "/api/v1/webhooks/ses",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="Amazon SES bounce / complaint notifications through SNS (signature verified)",
)
async def ses_webhook(request: web.Request) -> dict[str, int] | web.Response:
    topics = request.app[SETTINGS].ses_sns_topic_arns
    db = request.app[DATABASE]
    if not topics:
        raise NotFound()
    certificates = ses.certificates_of(request.app)
    return await take_delivery(
        request,
        check=lambda headers: ses.signed_headers(headers, topics=topics),
        apply=lambda signed, body: ses.receive(
            db, certificates=certificates, signed=signed, body=body
        ),
    )
