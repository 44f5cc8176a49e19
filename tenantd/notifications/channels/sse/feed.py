"""The SSE feed of one process: the open streams of each user, fed from the pub/sub hub.

Dispatch publishes the notification id on `notifications:user:<user_id>` (pg_notify, so
after commit). Each process LISTENs on one connection (the pub/sub hub), loads each
notification once and offers the frame to every open stream of that user. A client attached
to instance A therefore receives what instance B dispatched.

Each stream has a bounded queue: a client too slow to drain it is disconnected (it can
reconnect with Last-Event-ID) instead of holding memory or slowing anyone else.

Streams are capped per user (NOTIFICATIONS_SSE_MAX_STREAMS_PER_USER: a new one ends the user's
oldest) and per process (NOTIFICATIONS_SSE_MAX_STREAMS: over it 503 with Retry-After). aiohttp
does not tell a GET handler that its client left (handlers are not cancelled, and a body-less
request's payload stream ignores the connection loss), so one task per process polls the
streams' transports every TENANTD_SSE_DISCONNECT_CHECK_SECONDS and ends those whose connection
is gone, instead of each stream finding out at its next keep-alive write.

The TENANTD_SSE_* knobs are read once, when the feed starts: a bad value stops start-up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Literal

from aiohttp import web

from tenantd.cache.invalidation import CHANNEL as CACHE_CHANNEL
from tenantd.errors import ServiceUnavailable
from tenantd.notifications import queries
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.notifications.schemas import envelope
from tenantd.notifications.settings import NotificationSettings
from tenantd.pubsub import PUBSUB, Bus, Subscription

log = logging.getLogger(__name__)

LOAD_BATCH = 500  # notification ids loaded per query
RETRY_AFTER_SECONDS = 10  # Retry-After of the 503 over the process cap

CloseReason = Literal["shutdown", "superseded", "disconnected"]


class StreamQueue:
    """What one stream has yet to send; overflow marks it for disconnection."""

    def __init__(
        self,
        maxsize: int,
        connection_gone: Callable[[], bool] | None = None,
        session_id: uuid.UUID | None = None,
    ):
        self.maxsize = maxsize
        # The stream's session (the token's sid): ending that session re-checks it at once.
        self.session_id = session_id
        self.recheck = False
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

    def recheck_now(self) -> None:
        """Its token may have been revoked (a session ended, a user-wide change): wake the
        stream to re-check it now instead of at the next idle tick."""
        self.recheck = True
        self._event.set()

    def close(self, reason: CloseReason = "shutdown") -> None:
        if self.closing:
            return
        self.closing = True
        self.close_reason = reason
        self._event.set()

    async def hold(self, seconds: float) -> None:
        """Wait `seconds` whatever is offered meanwhile (it stays queued); a close, an
        overflow or a re-check request ends the wait early."""
        deadline = asyncio.get_running_loop().time() + seconds
        while not (self.closing or self.overflowed or self.recheck):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            self._event.clear()
            try:
                async with asyncio.timeout(left):
                    await self._event.wait()
            except TimeoutError:
                return

    async def wait(self, seconds: float) -> bool:
        """True when something happened, False on an idle tick."""
        if self.items or self.overflowed or self.gap or self.closing or self.recheck:
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

    def __init__(self, services: Notifications, hub: Bus):
        self.services = services
        self.hub = hub
        settings = services.settings
        self.config = settings.section(NotificationSettings)  # the TENANTD_SSE_* knobs
        self.max_streams = settings.section(NotificationSettings).notifications_sse_max_streams
        self.max_streams_per_user = settings.section(
            NotificationSettings
        ).notifications_sse_max_streams_per_user
        # Per user, oldest first (a dict keeps insertion order; a set would not).
        self._streams: dict[uuid.UUID, dict[StreamQueue, None]] = {}
        self._count = 0
        self._subscriptions: dict[uuid.UUID, Subscription] = {}
        self._user_locks: dict[uuid.UUID, asyncio.Lock] = {}
        self._loads: set[asyncio.Task[None]] = set()
        # Ids heard and not yet loaded (id -> the user whose channel named it), and the one
        # task loading them.
        self._pending: dict[uuid.UUID, uuid.UUID] = {}
        self._loader: asyncio.Task[None] | None = None
        # Streams by session (the token's sid), so ending a session finds its streams at once.
        self._by_session: dict[uuid.UUID, set[StreamQueue]] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._revocations: Subscription | None = None
        # SIGTERM came (close_all): the drain still serves open keep-alive connections, and a
        # stream opened on one would hold the shutdown until its bound.
        self._shutting_down = False

    @property
    def stream_count(self) -> int:
        return self._count

    def user_stream_count(self, user_id: uuid.UUID) -> int:
        return len(self._streams.get(user_id, ()))

    def start(self) -> None:
        """Begin watching for clients that left (call once, from a running loop)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch_disconnects())

    async def attach(self, user_id: uuid.UUID, queue: StreamQueue) -> None:
        """Register a stream: over the user's cap their oldest ends; over the process cap 503;
        after close_all it is ended at once, as the others were (its client reconnects
        elsewhere)."""
        if self._shutting_down:
            queue.close("shutdown")
            return
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
        if queue.session_id is not None:
            self._by_session.setdefault(queue.session_id, set()).add(queue)
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

    async def watch_revocations(self) -> None:
        """Hear the caches' invalidations too (the same NOTIFY channel): an ended
        session or a user-wide change wakes the affected streams to re-check their token."""
        self._revocations = await self.hub.subscribe(CACHE_CHANNEL, self._on_invalidation)

    def _on_invalidation(self, _channel: str, payload: str) -> None:
        kind, _, value = payload.partition(":")
        if kind not in ("user", "session"):
            return  # inbox changes (one per notification written) concern no stream's token
        try:
            key = uuid.UUID(value)
        except ValueError:
            return
        if kind == "user":
            for queue in self._streams.get(key, ()):
                queue.recheck_now()
        elif kind == "session":
            for queue in self._by_session.get(key, ()):
                queue.recheck_now()

    async def detach(self, user_id: uuid.UUID, queue: StreamQueue) -> None:
        lock = self._user_locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            streams = self._streams.get(user_id)
            if streams is None or queue not in streams:
                return
            del streams[queue]
            self._count -= 1
            if queue.session_id is not None:
                same_session = self._by_session.get(queue.session_id)
                if same_session is not None:
                    same_session.discard(queue)
                    if not same_session:
                        del self._by_session[queue.session_id]
            if streams:
                return
            del self._streams[user_id]
            subscription = self._subscriptions.pop(user_id, None)
            self._user_locks.pop(user_id, None)
        if subscription is not None:
            await self.hub.unsubscribe(subscription)

    def close_all(self) -> None:
        """Shutdown: every stream ends (clients reconnect to another instance), and so does
        every stream opened from now on."""
        self._shutting_down = True
        for streams in self._streams.values():
            for queue in streams:
                queue.close("shutdown")

    async def _watch_disconnects(self) -> None:
        while True:
            await asyncio.sleep(self.config.sse_disconnect_check_seconds)
            for streams in self._streams.values():
                for queue in streams:
                    if not queue.closing and queue.connection_gone():
                        queue.close("disconnected")

    async def close(self) -> None:
        self.close_all()
        if self._revocations is not None:
            await self.hub.unsubscribe(self._revocations)
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
        self._pending[notification_id] = user_id
        if self._loader is None:
            self._loader = asyncio.get_running_loop().create_task(self._load_pending())
            self._loads.add(self._loader)
            self._loader.add_done_callback(self._loads.discard)

    async def _load_pending(self) -> None:
        """Load what the channels named, LOAD_BATCH ids a query: what arrives meanwhile
        waits for the next query, so a burst costs a few round trips, not one per id."""
        try:
            while self._pending:
                batch: dict[uuid.UUID, uuid.UUID] = {}
                while self._pending and len(batch) < LOAD_BATCH:
                    notification_id = next(iter(self._pending))  # oldest first
                    user_id = self._pending.pop(notification_id)
                    if self._streams.get(user_id):
                        batch[notification_id] = user_id
                if batch:
                    await self._load(batch)
        finally:
            self._loader = None

    async def _load(self, batch: dict[uuid.UUID, uuid.UUID]) -> None:
        try:
            async with self.services.db.connection() as conn:
                rows = await queries.sse_notifications(conn, ids=list(batch))
        except Exception:
            log.exception("loading notifications for SSE failed")
            # Their streams replay from their last message once the database answers.
            for user_id in set(batch.values()):
                self._on_gap(user_id)
            return
        rows.sort(key=lambda row: (row["created_at"], row["id"]))
        for row in rows:
            user_id = row["user_id"]
            if batch.get(row["id"]) != user_id:
                continue  # named on another user's channel
            data = envelope(row)
            for queue in list(self._streams.get(user_id, ())):
                queue.offer(row["id"], data)


FEED_KEY: web.AppKey[NotificationFeed] = web.AppKey("notifications_feed", NotificationFeed)


async def sse_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: the stream feed on the process's pub/sub hub (SSE switch on)."""
    services = notifications_of(app)
    if not services.settings.section(NotificationSettings).notifications_sse_enabled:
        yield
        return
    feed = NotificationFeed(services, app[PUBSUB])
    app[FEED_KEY] = feed
    feed.start()
    await feed.watch_revocations()

    async def end_streams(_app: web.Application) -> None:
        feed.close_all()

    app.on_shutdown.append(end_streams)
    try:
        yield
    finally:
        await feed.close()
