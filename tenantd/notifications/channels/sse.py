"""SSE channel: GET /api/v1/notifications/stream (NOTIFICATIONS_SSE_ENABLED; 404 when off).

Dispatch publishes the notification id on `notifications:user:<user_id>` (pg_notify, so
after commit). Each process LISTENs on one connection (the pub/sub hub), loads each
notification once and offers the frame to every open stream of that user. A client attached
to instance A therefore receives what instance B dispatched.

Each stream has a bounded queue: a client too slow to drain it is disconnected (it can
reconnect with Last-Event-ID) instead of holding memory or slowing anyone else. Before each
buffered message and on every idle tick the access token is checked again (expiry, jti
revocation, the user-wide cutoff); any failure ends the stream.

Streams are capped per user (NOTIFICATIONS_SSE_MAX_STREAMS_PER_USER: a new one ends the user's
oldest) and per process (NOTIFICATIONS_SSE_MAX_STREAMS: over it 503 with Retry-After). aiohttp
does not tell a GET handler that its client left (handlers are not cancelled, and a body-less
request's payload stream ignores the connection loss), so one task per process polls the
streams' transports every TENANTD_SSE_DISCONNECT_CHECK_SECONDS and ends those whose connection
is gone, instead of each stream finding out at its next keep-alive write.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Literal

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from tenantd.errors import AppError, NotFound, ServiceUnavailable
from tenantd.identity.guards import check_claims
from tenantd.identity.tokens import AccessClaims
from tenantd.notifications import queries
from tenantd.notifications.schemas import envelope
from tenantd.notifications.services import NOTIFICATION_SERVICES, NotificationServices
from tenantd.principal import Principal
from tenantd.pubsub import PubSubHub, Subscription
from tenantd.pubsub.hub import PUBSUB

log = logging.getLogger(__name__)

SHUTDOWN_COMMENT = b": server shutting down\n\n"
# The replaced stream's EventSource reconnects after `retry` ms: slowly, so a user with more
# tabs than the cap does not make them evict each other in a tight loop.
SUPERSEDED_FRAME = b": replaced by a newer stream of this user\nretry: 30000\n\n"

TICK_SECONDS = 15.0  # idle re-check and keep-alive comment; TENANTD_SSE_TICK_SECONDS overrides
QUEUE_SIZE = 100  # frames buffered per stream; TENANTD_SSE_QUEUE_SIZE overrides
REPLAY_LIMIT = 100  # frames replayed for Last-Event-ID
SEND_TIMEOUT = 30.0  # a write that does not finish in time aborts that stream
RECENT_IDS = 256  # ids remembered per stream so replay and live frames never double
DISCONNECT_CHECK_SECONDS = 1.0  # TENANTD_SSE_DISCONNECT_CHECK_SECONDS overrides
RETRY_AFTER_SECONDS = 10  # Retry-After of the 503 over the process cap

CloseReason = Literal["shutdown", "superseded", "disconnected"]


def _setting(services: NotificationServices, name: str, default: float) -> float:
    raw = services.settings.extra.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


class StreamQueue:
    """What one stream has yet to send; overflow marks it for disconnection."""

    def __init__(self, maxsize: int, connection_gone: Callable[[], bool] | None = None):
        self.maxsize = maxsize
        self.connection_gone = connection_gone or (lambda: False)
        self.items: collections.deque[tuple[uuid.UUID, bytes]] = collections.deque()
        self.overflowed = False
        self.gap = False
        self.closing = False
        self.close_reason: CloseReason | None = None
        self._event = asyncio.Event()

    def offer(self, notification_id: uuid.UUID, data: bytes) -> None:
        if self.overflowed or self.closing:
            return
        if len(self.items) >= self.maxsize:
            self.overflowed = True
        else:
            self.items.append((notification_id, data))
        self._event.set()

    def signal_gap(self) -> None:
        self.gap = True
        self._event.set()

    def close(self, reason: CloseReason = "shutdown") -> None:
        if self.closing:
            return
        self.closing = True
        self.close_reason = reason
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """True when something happened, False on an idle tick."""
        if self.items or self.overflowed or self.gap or self.closing:
            return True
        self._event.clear()
        try:
            async with asyncio.timeout(seconds):  # no extra task per wait, unlike wait_for
                await self._event.wait()
        except TimeoutError:
            return False
        return True


class NotificationFeed:
    """Per process: the open streams of each user, fed from the pub/sub hub."""

    def __init__(self, services: NotificationServices, hub: PubSubHub):
        self.services = services
        self.hub = hub
        settings = services.settings
        self.max_streams = settings.notifications_sse_max_streams
        self.max_streams_per_user = settings.notifications_sse_max_streams_per_user
        self.disconnect_check = _setting(
            services, "TENANTD_SSE_DISCONNECT_CHECK_SECONDS", DISCONNECT_CHECK_SECONDS
        )
        # Per user, oldest first (a dict keeps insertion order; a set would not).
        self._streams: dict[uuid.UUID, dict[StreamQueue, None]] = {}
        self._count = 0
        self._subscriptions: dict[uuid.UUID, Subscription] = {}
        self._user_locks: dict[uuid.UUID, asyncio.Lock] = {}
        self._loads: set[asyncio.Task[None]] = set()
        self._watcher: asyncio.Task[None] | None = None

    @property
    def stream_count(self) -> int:
        return self._count

    def user_stream_count(self, user_id: uuid.UUID) -> int:
        return len(self._streams.get(user_id, ()))

    def start(self) -> None:
        """Begin watching for clients that left (call once, from a running loop)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch_disconnects())

    async def attach(self, user_id: uuid.UUID, queue: StreamQueue) -> None:
        """Register a stream: over the user's cap their oldest ends; over the process cap 503."""
        # Counted and added before any await, so concurrent attaches cannot all pass the caps.
        streams = self._streams.get(user_id, {})
        live = [stream for stream in streams if not stream.closing]
        excess = len(live) + 1 - self.max_streams_per_user
        # A stream that replaces one of the same user's adds nothing once the old one is gone.
        if self._count >= self.max_streams and excess <= 0:
            raise ServiceUnavailable(
                RETRY_AFTER_SECONDS, "Too many open notification streams; try again later"
            )
        for oldest in live[: max(excess, 0)]:
            oldest.close("superseded")
        self._streams.setdefault(user_id, {})[queue] = None
        self._count += 1
        lock = self._user_locks.setdefault(user_id, asyncio.Lock())
        try:
            async with lock:
                if user_id not in self._subscriptions:
                    self._subscriptions[user_id] = await self.hub.subscribe(
                        queries.user_topic(user_id),
                        lambda _channel, payload: self._on_message(user_id, payload),
                        on_gap=lambda: self._on_gap(user_id),
                    )
        except BaseException:
            await self.detach(user_id, queue)
            raise

    async def detach(self, user_id: uuid.UUID, queue: StreamQueue) -> None:
        lock = self._user_locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            streams = self._streams.get(user_id)
            if streams is None or queue not in streams:
                return
            del streams[queue]
            self._count -= 1
            if streams:
                return
            del self._streams[user_id]
            subscription = self._subscriptions.pop(user_id, None)
            self._user_locks.pop(user_id, None)
        if subscription is not None:
            await self.hub.unsubscribe(subscription)

    def close_all(self) -> None:
        """Shutdown: every stream ends (clients reconnect to another instance)."""
        for streams in self._streams.values():
            for queue in streams:
                queue.close("shutdown")

    async def _watch_disconnects(self) -> None:
        while True:
            await asyncio.sleep(self.disconnect_check)
            for streams in self._streams.values():
                for queue in streams:
                    if not queue.closing and queue.connection_gone():
                        queue.close("disconnected")

    async def close(self) -> None:
        self.close_all()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for task in list(self._loads):
            task.cancel()
        for task in list(self._loads):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _on_gap(self, user_id: uuid.UUID) -> None:
        for queue in self._streams.get(user_id, ()):
            queue.signal_gap()

    def _on_message(self, user_id: uuid.UUID, payload: str) -> None:
        try:
            notification_id = uuid.UUID(payload)
        except ValueError:
            log.warning("ignoring malformed notification id on the user channel")
            return
        task = asyncio.get_running_loop().create_task(self._load(user_id, notification_id))
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    async def _load(self, user_id: uuid.UUID, notification_id: uuid.UUID) -> None:
        if not self._streams.get(user_id):
            return
        try:
            async with self.services.db.connection() as conn:
                row = await queries.notification_for_user(
                    conn, notification_id=notification_id, user_id=user_id
                )
        except Exception:
            log.exception("loading a notification for SSE failed")
            return
        if row is None:
            return
        data = envelope(row)
        for queue in list(self._streams.get(user_id, ())):
            queue.offer(notification_id, data)


async def _still_valid(services: NotificationServices, claims: AccessClaims) -> bool:
    """Expiry, jti revocation and the user-wide cutoff, re-checked before every message.

    The request-context cache answers when it holds this token: it is invalidated by the same
    writes (logout, logout-all, membership changes) at once on this instance and within
    milliseconds on others, so a hot stream does not cost a query per message.
    """
    if claims.expires_at <= time.time():
        return False
    cache = services.context_cache
    if cache.principal(claims.jti) is not None:
        return True
    generation = cache.generation
    try:
        async with services.db.connection() as conn:
            principal = await check_claims(conn, claims)
    except AppError:
        return False
    cache.store_principal(principal, generation)
    return True


def _connection_gone(request: web.Request) -> Callable[[], bool]:
    def gone() -> bool:
        transport = request.transport  # None once aiohttp saw connection_lost
        return transport is None or transport.is_closing()

    return gone


def _last_event_id(request: web.Request) -> uuid.UUID | None:
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


async def stream_notifications(request: web.Request, principal: Principal) -> web.StreamResponse:
    """Stream the caller's new notifications until the token fails or the client leaves."""
    services = request.app[NOTIFICATION_SERVICES]
    feed = request.app.get(FEED_KEY)
    if not services.settings.notifications_sse_enabled or feed is None:
        raise NotFound("The notification stream is not enabled")
    tick = _setting(services, "TENANTD_SSE_TICK_SECONDS", TICK_SECONDS)
    claims = principal.claims
    user_id = principal.user_id
    queue = StreamQueue(
        int(_setting(services, "TENANTD_SSE_QUEUE_SIZE", QUEUE_SIZE)), _connection_gone(request)
    )
    last_sent = _last_event_id(request)
    recent: collections.deque[uuid.UUID] = collections.deque(maxlen=RECENT_IDS)
    # Subscribe before replaying, so nothing published in between is lost.
    await feed.attach(user_id, queue)
    response = EventSourceResponse(sep="\n", ping_interval=3600 * 24, send_timeout=SEND_TIMEOUT)
    try:
        await response.prepare(request)
        async with response:
            if last_sent is not None:
                await _replay(services, response, user_id, last_sent, recent)
                if recent:
                    last_sent = recent[-1]
            while True:
                active = await queue.wait(tick)
                if queue.closing or queue.overflowed:
                    if queue.overflowed:
                        log.warning(
                            "SSE client too slow; stream ended", extra={"user_id": str(user_id)}
                        )
                    elif queue.close_reason == "shutdown":  # reconnect elsewhere
                        with contextlib.suppress(ConnectionError, RuntimeError):
                            await response.write(SHUTDOWN_COMMENT)
                    elif queue.close_reason == "superseded":
                        with contextlib.suppress(ConnectionError, RuntimeError):
                            await response.write(SUPERSEDED_FRAME)
                    break
                if not await _still_valid(services, claims):
                    break
                if not active:
                    await response.write(b": keep-alive\n\n")
                    continue
                if queue.gap:
                    queue.gap = False
                    if last_sent is not None:
                        await _replay(services, response, user_id, last_sent, recent)
                while queue.items:
                    notification_id, data = queue.items.popleft()
                    if notification_id in recent:
                        continue
                    if not await _still_valid(services, claims):
                        return response
                    await response.send(data.decode(), id=str(notification_id))
                    recent.append(notification_id)
                    last_sent = notification_id
    except (ConnectionResetError, ConnectionError, TimeoutError):
        pass  # the client went away or stalled
    finally:
        await feed.detach(user_id, queue)
    return response


async def _replay(
    services: NotificationServices,
    response: EventSourceResponse,
    user_id: uuid.UUID,
    after: uuid.UUID,
    recent: collections.deque[uuid.UUID],
) -> None:
    async with services.db.connection() as conn:
        rows = await queries.sse_notifications_after(
            conn, user_id=user_id, after_id=after, limit=REPLAY_LIMIT
        )
    for row in rows:
        if row["id"] in recent:
            continue
        await response.send(envelope(row).decode(), id=str(row["id"]))
        recent.append(row["id"])


FEED_KEY: web.AppKey[NotificationFeed] = web.AppKey("notifications_feed", NotificationFeed)


async def sse_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: the stream feed on the process's pub/sub hub (SSE switch on)."""
    services = app[NOTIFICATION_SERVICES]
    if not services.settings.notifications_sse_enabled:
        yield
        return
    feed = NotificationFeed(services, app[PUBSUB])
    app[FEED_KEY] = feed
    feed.start()

    async def end_streams(_app: web.Application) -> None:
        feed.close_all()

    app.on_shutdown.append(end_streams)
    try:
        yield
    finally:
        await feed.close()
