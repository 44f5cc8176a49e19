"""The provider webhooks (Resend, SendGrid, Postmark, Amazon SES through SNS). The raw body
is read once, here, and verified as is.

Order: the signature headers are checked before a byte of the body is read (a request that
could never verify gets 401 at once and its connection is closed, so its body is never
waited for); then the body is read into a slot, then verified and applied. A request that
waited SLOT_WAIT_SECONDS without a slot gets 503 with Retry-After (providers retry).

Slots, so that nobody without credentials can starve a provider that has them:
- A request already authenticated by its headers (Postmark's Basic credentials) takes a slot
  of its own pool (TENANTD_WEBHOOK_MAX_BODIES of them), which unauthenticated bodies never use.
- The others (a signature over the body can only be judged once the body is in) share a pool
  of TENANTD_WEBHOOK_MAX_BODIES slots, at most TENANTD_WEBHOOK_MAX_BODIES_PER_CLIENT of them
  per client address (an IPv6 client by its /64).
- A body must keep coming: after BODY_GRACE_SECONDS it must have averaged
  TENANTD_WEBHOOK_MIN_BODY_RATE bytes a second (a slow-loris body is cut with 408 and its
  connection closed), and it is cut after BODY_READ_SECONDS whatever its pace.
Each body is at most 10 MiB, so at most 2 x TENANTD_WEBHOOK_MAX_BODIES x 10 MiB are held.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from tenantd.db import DATABASE, Database
from tenantd.email.settings import MailVerdictSettings
from tenantd.errors import AppError, Unauthorized
from tenantd.ops.ratelimit import ip_key
from tenantd.settings import SETTINGS, Settings
from tenantd.suppression.webhooks import postmark, resend, sendgrid, ses
from tenantd.suppression.webhooks.ingest import Receiver
from tenantd.web.body import read_limited
from tenantd.web.json import error_response
from tenantd.web.middlewares import REQUEST_ID
from tenantd.web.ratelimit import request_ip
from tenantd.web.schemas import ApiModel
from tenantd.web.spec import CURRENT_ROUTE, Access, Routes


def _state(app: web.Application) -> None:
    """The process's body gate, and the SNS certificate cache (fetching over HTTPS; a test
    puts one of its own in its place before start-up)."""
    app[BODY_GATE] = new_gate(app[SETTINGS])
    app[ses.SNS_CERTIFICATES] = ses.SnsCertificates(ses.https_fetch)


ROUTES = Routes("webhooks", state=_state)

RESPONSES = {
    401: "Signature, timestamp or headers invalid (refused before the body is read)",
    404: "Webhook not configured",
    408: "The body did not arrive in time, or too slowly",
    503: "Too many webhook bodies in flight; retry after Retry-After seconds",
}

DEFAULT_MAX_BODIES = 8  # x 10 MiB: the most webhook bodies of a pool held in memory at once
SLOT_WAIT_SECONDS = 10.0  # a burst waits this long for a slot, then gets 503
BODY_READ_SECONDS = 60.0  # a slow sender never holds a slot longer
BODY_GRACE_SECONDS = 2.0  # a body's first bytes may take this long ...
DEFAULT_MIN_BODY_RATE = 4096  # ... then it must average this many bytes a second
BUSY_RETRY_AFTER = 5


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
    """At most `limit` webhook bodies of each pool read or held at once (at most `per_client`
    of the unauthenticated pool per client), so they never take more than 2 x limit x 10 MiB.
    A request waits up to `wait` seconds for a slot (meanwhile its body stays unread: aiohttp
    stops reading the socket after 128 KiB); a slot is held for the read (`read_seconds` at
    most, at `min_rate` bytes a second at least after `grace` seconds) and the processing."""

    def __init__(
        self,
        limit: int,
        *,
        per_client: int | None = None,
        wait: float = SLOT_WAIT_SECONDS,
        read_seconds: float = BODY_READ_SECONDS,
        grace: float = BODY_GRACE_SECONDS,
        min_rate: float = DEFAULT_MIN_BODY_RATE,
    ):
        self.limit = limit
        self.per_client = per_client if per_client is not None else max(1, limit // 4)
        self.wait = wait
        self.read_seconds = read_seconds
        self.grace = grace
        self.min_rate = min_rate
        self.held = 0  # unauthenticated bodies in slots
        self.waiting = 0
        self.authenticated_held = 0
        self._slots = asyncio.Semaphore(limit)
        self._authenticated = asyncio.Semaphore(limit)
        # client key -> (its semaphore, [requests holding or waiting for it, holding it])
        self._clients: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    def held_by(self, client: str) -> int:
        """The client's share of the unauthenticated pool in use now."""
        entry = self._clients.get(ip_key(client))
        return entry[1][1] if entry is not None else 0

    @contextlib.asynccontextmanager
    async def _client_slot(self, client: str | None) -> AsyncIterator[None]:
        key = ip_key(client) if client else "?"
        entry = self._clients.get(key)
        if entry is None:
            entry = self._clients[key] = (asyncio.Semaphore(self.per_client), [0, 0])
        semaphore, counts = entry
        counts[0] += 1
        try:
            await semaphore.acquire()
            counts[1] += 1
            try:
                yield
            finally:
                counts[1] -= 1
                semaphore.release()
        finally:
            counts[0] -= 1
            if counts[0] == 0:
                del self._clients[key]

    @contextlib.asynccontextmanager
    async def slot(self, client: str | None, *, authenticated: bool = False) -> AsyncIterator[None]:
        """A slot of the authenticated pool, or of the shared one within `client`'s share."""
        if authenticated:
            async with self._take(self._authenticated, contextlib.nullcontext()):
                self.authenticated_held += 1
                try:
                    yield
                finally:
                    self.authenticated_held -= 1
            return
        async with self._take(self._slots, self._client_slot(client)):
            self.held += 1
            try:
                yield
            finally:
                self.held -= 1

    @contextlib.asynccontextmanager
    async def _take(
        self, pool: asyncio.Semaphore, share: contextlib.AbstractAsyncContextManager[None]
    ) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            self.waiting += 1
            try:
                async with asyncio.timeout(self.wait):
                    await stack.enter_async_context(share)
                    await pool.acquire()
            except TimeoutError:
                raise WebhooksBusy() from None
            finally:
                self.waiting -= 1
            try:
                yield
            finally:
                pool.release()

    def pace(self) -> Callable[[int], float]:
        """The read's deadline for more than `size` bytes: `min_rate` bytes a second after
        `grace`, and `read_seconds` in all."""
        start = asyncio.get_running_loop().time()
        last = start + self.read_seconds
        return lambda size: min(last, start + self.grace + size / self.min_rate)


def max_bodies(settings: Settings) -> int:
    return settings.section(MailVerdictSettings).webhook_max_bodies


def new_gate(settings: Settings) -> BodyGate:
    section = settings.section(MailVerdictSettings)
    limit = section.webhook_max_bodies
    per_client = section.webhook_max_bodies_per_client
    return BodyGate(
        limit,
        per_client=max(1, limit // 4) if per_client is None else per_client,
        min_rate=section.webhook_min_body_rate,
    )


BODY_GATE = web.AppKey("webhook_body_gate", BodyGate)


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
    receiver: Receiver,
) -> dict[str, int] | web.Response:
    """Headers first (401 with the body unread), then the body in a slot, then verify and
    apply (the provider's `receiver`)."""
    try:
        signed = receiver.check(request.headers)
    except Unauthorized as refused:
        return await closing(request, refused)
    gate = request.app[BODY_GATE]
    try:
        async with gate.slot(request_ip(request), authenticated=receiver.authenticated):
            try:
                body = await read_limited(
                    request, request[CURRENT_ROUTE].body_limit, deadline=gate.pace()
                )
            except TimeoutError:
                return await closing(request, BodyTimeout())
            outcome = await receiver.apply(signed, body)
    except WebhooksBusy as busy:
        return await closing(request, busy)
    return outcome.as_json()


class WebhookReceipt(ApiModel):
    events: int
    recorded: int
    duplicates: int
    ignored: int
    malformed: int


MakeReceiver = Callable[[MailVerdictSettings, Database, web.Application], Receiver]


def provider_route(provider: str, make: MakeReceiver, summary: str) -> None:
    """POST /api/v1/webhooks/<provider>: the delivery taken by `make`'s receiver."""

    async def view(request: web.Request) -> dict[str, int] | web.Response:
        verdicts = request.app[SETTINGS].section(MailVerdictSettings)
        return await take_delivery(request, make(verdicts, request.app[DATABASE], request.app))

    view.__name__ = view.__qualname__ = f"{provider}_webhook"  # the OpenAPI operationId
    ROUTES.post(
        f"/api/v1/webhooks/{provider}",
        access=Access.SIGNATURE,
        response=WebhookReceipt,
        responses=RESPONSES,
        summary=summary,
    )(view)


PROVIDERS: tuple[tuple[str, MakeReceiver, str], ...] = (
    (
        "resend",
        resend.receiver,
        "Resend (Svix / Standard Webhooks signed) email.bounced / email.complained events",
    ),
    (
        "sendgrid",
        sendgrid.receiver,
        "SendGrid signed Event Webhook batch (bounce, spamreport, dropped)",
    ),
    (
        "postmark",
        postmark.receiver,
        "Postmark bounce / spam-complaint webhook (HTTP Basic auth from the webhook URL)",
    ),
    (
        "ses",
        ses.receiver,
        "Amazon SES bounce / complaint notifications through SNS (signature verified)",
    ),
)
for provider, make, summary in PROVIDERS:
    provider_route(provider, make, summary)
