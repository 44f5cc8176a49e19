"""SSE channel: GET /api/v1/notifications/stream (NOTIFICATIONS_SSE_ENABLED; 404 when off).

The handler attaches a bounded queue to the process's feed (feed.py), replays what came
after Last-Event-ID, then sends what the feed offers. Before each buffered message and on
every idle tick the principal is checked again by the guard's own `recheck` (expiry, jti
and session revocation, the user-wide cutoff); any failure ends the stream.

A stream never stays open and silent. While the database is away (a re-check or a replay
cannot run) it holds its messages, keeps sending keep-alives and tries again at the next
tick; nothing is sent unchecked. Any other error ends it cleanly (the body is terminated),
so the client reconnects with Last-Event-ID and the replay gives it what it missed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import uuid
from collections.abc import Callable

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from tenantd.db.errors import DatabaseUnavailable
from tenantd.errors import NotFound, Unauthorized
from tenantd.identity.guards import recheck
from tenantd.identity.tokens import AccessClaims
from tenantd.notifications import queries
from tenantd.notifications.channels.sse.feed import FEED_KEY, StreamQueue
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.notifications.schemas import envelope
from tenantd.notifications.settings import NotificationSettings
from tenantd.principal import Principal
from tenantd.web.cors import apply_cors

log = logging.getLogger(__name__)

SHUTDOWN_COMMENT = b": server shutting down\n\n"
# The replaced stream's EventSource reconnects after `retry` ms: slowly, so a user with more
# tabs than the cap does not make them evict each other in a tight loop.
SUPERSEDED_FRAME = b": replaced by a newer stream of this user\nretry: 30000\n\n"

REPLAY_LIMIT = 100  # frames replayed for Last-Event-ID
# How long a notification's commit and publish may trail its creation time and still be
# replayed after a later one (a dispatch transaction, the relay and the bus together).
REPLAY_LOOKBACK_SECONDS = 30.0
SEND_TIMEOUT = 30.0  # a write that does not finish in time aborts that stream
RECENT_IDS = 256  # ids remembered per stream so replay and live frames never double
KEEP_ALIVE = b": keep-alive\n\n"


async def _revoked(services: Notifications, claims: AccessClaims) -> bool | None:
    """True when the token no longer holds (or its account now requires a factor this
    session did not use), False when it does, None when it cannot be checked now (the
    database is away)."""
    try:
        principal = await recheck(services.identity, claims)
    except Unauthorized:
        return True
    except DatabaseUnavailable:
        return None
    return principal.owes_factor


def _connection_gone(request: web.Request) -> Callable[[], bool]:
    # The transport's own flag, read directly: the feed polls every stream each second, so
    # at 10,000 streams a closure and two property look-ups per poll add up. A transport
    # is closing from the moment aiohttp could see its connection lost.
    transport = request.transport
    if transport is None:
        return lambda: True
    return transport.is_closing


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
    services = notifications_of(request.app)
    feed = request.app.get(FEED_KEY)
    if (
        not services.settings.section(NotificationSettings).notifications_sse_enabled
        or feed is None
    ):
        raise NotFound("The notification stream is not enabled")
    tick = feed.config.sse_tick_seconds
    claims = principal.claims
    user_id = principal.user_id
    queue = StreamQueue(
        feed.config.sse_queue_size, _connection_gone(request), session_id=principal.session_id
    )
    last_sent = _last_event_id(request)
    recent: collections.deque[uuid.UUID] = collections.deque(maxlen=RECENT_IDS)
    # Subscribe before replaying, so nothing published in between is lost.
    await feed.attach(user_id, queue)
    response = EventSourceResponse(sep="\n", ping_interval=3600 * 24, send_timeout=SEND_TIMEOUT)
    apply_cors(request, response)  # prepared here, not by the envelope
    try:
        await response.prepare(request)
        async with response:
            # A replay owed (Last-Event-ID, or a gap in the feed) is a gap to fill.
            queue.gap = last_sent is not None
            while True:
                active = queue.gap or await queue.wait(tick)
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
                queue.recheck = False
                verdict = await _revoked(services, claims)
                if verdict:
                    break
                if verdict is None or not active:
                    await response.write(KEEP_ALIVE)
                    if verdict is None:  # the database is away: hold everything a tick
                        await queue.hold(tick)
                    continue
                if queue.gap and last_sent is not None:
                    try:
                        await _replay(services, response, user_id, last_sent, recent)
                    except DatabaseUnavailable:
                        await response.write(KEEP_ALIVE)
                        await queue.hold(tick)
                        continue
                    if recent:
                        last_sent = recent[-1]
                queue.gap = False
                while queue.items:
                    notification_id, data = queue.items[0]
                    if notification_id not in recent:
                        verdict = await _revoked(services, claims)
                        if verdict:
                            return response
                        if verdict is None:
                            break  # sent once the token is checked again
                        await response.send(data.decode(), id=str(notification_id))
                        recent.append(notification_id)
                        last_sent = notification_id
                    queue.items.popleft()
    except (ConnectionResetError, ConnectionError, TimeoutError):
        pass  # the client went away or stalled
    except Exception:
        # The headers went out: an error answer is impossible. End the body cleanly so the
        # client reconnects (with Last-Event-ID) instead of waiting on a silent stream.
        log.exception("SSE stream failed; ended so its client reconnects")
    finally:
        await feed.detach(user_id, queue)
    return response


async def _replay(
    services: Notifications,
    response: EventSourceResponse,
    user_id: uuid.UUID,
    after: uuid.UUID,
    recent: collections.deque[uuid.UUID],
) -> None:
    async with services.db.connection() as conn:
        rows = await queries.sse_notifications_after(
            conn,
            user_id=user_id,
            after_id=after,
            limit=REPLAY_LIMIT,
            lookback_seconds=REPLAY_LOOKBACK_SECONDS,
        )
    for row in rows:
        if row["id"] in recent:
            continue
        await response.send(envelope(row).decode(), id=str(row["id"]))
        recent.append(row["id"])
