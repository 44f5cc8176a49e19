"""In-process cache of the resolved request context, with bounded staleness.

What is cached: the Principal of an access token (keyed by jti: user, aid, role, after the
revocation and cutoff checks), the serialised /me body (keyed by user and aid), and the
user's inbox answers (first pages and unread count).

How it stays correct: database triggers (sql/0070, 0071) announce every write to users,
memberships, accounts, plans, feature overrides, passwords, identities, revoked tokens and
notifications.
 * Other instances hear it through LISTEN tenantd_cache (delivered on commit, in ms).
 * The writing process sees it as a NOTICE on its own connection and invalidates at once
   (`apply_notices`, called by the db layer after commit), before it answers.
 * A load that raced an invalidation is not stored (generation check).
 * While the process's LISTEN connection (the pub/sub hub) is down the cache is off, and it
   is flushed on reconnect, so staleness is bounded by notification latency, never by
   time-to-live guesses.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from typing import Any

from aiohttp import web

from tenantd import appkeys
from tenantd.auth.principal import Principal

log = logging.getLogger(__name__)

CHANNEL = "tenantd_cache"
_NOTICE = re.compile(r"tenantd_cache:(user|account|jti|inbox|all)(?::([0-9a-f-]{36}))?")
PSYCOPG_NOTICE_LIMIT = 50  # psycopg2 keeps only the newest 50 notices


class ContextCache:
    def __init__(self, max_entries: int = 200_000):
        self.max_entries = max_entries
        self.enabled = False
        # Whether invalidations are reaching us right now (the listener's connection is up).
        self.live: Callable[[], bool] = lambda: True
        self.generation = 0
        self._principals: OrderedDict[uuid.UUID, Principal] = OrderedDict()
        self._jtis_by_user: dict[uuid.UUID, set[uuid.UUID]] = {}
        self._me: dict[tuple[uuid.UUID, uuid.UUID | None], bytes] = {}
        # Per-user inbox answers (first pages, unread count). They change with every new
        # notification, so they carry their own per-user generation: dispatch traffic must
        # not stop auth contexts from being cached.
        self._inbox: dict[uuid.UUID, dict[Hashable, Any]] = {}
        self._inbox_generation: dict[uuid.UUID, int] = {}
        self.hits = 0
        self.misses = 0

    @property
    def serving(self) -> bool:
        return self.enabled and self.live()

    # reads ---------------------------------------------------------------
    def principal(self, jti: uuid.UUID) -> Principal | None:
        if not self.serving:
            return None
        found = self._principals.get(jti)
        if found is None or found.expires_at <= time.time():
            self.misses += 1
            return None
        self.hits += 1
        return found

    def me_body(self, user_id: uuid.UUID, account_id: uuid.UUID | None) -> bytes | None:
        if not self.serving:
            return None
        return self._me.get((user_id, account_id))

    # writes (only when nothing was invalidated since the load began) ------
    def store_principal(self, principal: Principal, generation: int) -> None:
        if not self.serving or generation != self.generation:
            return
        if len(self._principals) >= self.max_entries:
            old_jti, old = self._principals.popitem(last=False)
            self._jtis_by_user.get(old.user_id, set()).discard(old_jti)
        self._principals[principal.jti] = principal
        self._jtis_by_user.setdefault(principal.user_id, set()).add(principal.jti)

    def store_me(
        self, user_id: uuid.UUID, account_id: uuid.UUID | None, body: bytes, generation: int
    ) -> None:
        if not self.serving or generation != self.generation:
            return
        if len(self._me) >= self.max_entries:
            self._me.clear()
        self._me[(user_id, account_id)] = body

    # the inbox: keyed by user, then by what was asked -------------------
    def inbox_version(self, user_id: uuid.UUID) -> tuple[int, int]:
        return self.generation, self._inbox_generation.get(user_id, 0)

    def inbox(self, user_id: uuid.UUID, key: Hashable) -> Any:
        if not self.serving:
            return None
        return self._inbox.get(user_id, {}).get(key)

    def store_inbox(
        self, user_id: uuid.UUID, key: Hashable, value: Any, version: tuple[int, int]
    ) -> None:
        if not self.serving or version != self.inbox_version(user_id):
            return
        if len(self._inbox) >= self.max_entries:
            self._inbox.clear()
        self._inbox.setdefault(user_id, {})[key] = value

    def invalidate_inbox(self, user_id: uuid.UUID) -> None:
        self._inbox_generation[user_id] = self._inbox_generation.get(user_id, 0) + 1
        self._inbox.pop(user_id, None)

    # invalidation --------------------------------------------------------
    def invalidate_user(self, user_id: uuid.UUID) -> None:
        self.invalidate_inbox(user_id)
        self.generation += 1
        for jti in self._jtis_by_user.pop(user_id, set()):
            self._principals.pop(jti, None)
        for key in [k for k in self._me if k[0] == user_id]:
            del self._me[key]

    def invalidate_jti(self, jti: uuid.UUID) -> None:
        self.generation += 1
        principal = self._principals.pop(jti, None)
        if principal is not None:
            self._jtis_by_user.get(principal.user_id, set()).discard(jti)

    def flush(self) -> None:
        """Account-wide and plan-wide changes touch many users: start over."""
        self.generation += 1
        self._principals.clear()
        self._jtis_by_user.clear()
        self._me.clear()
        self._inbox.clear()

    def apply(self, payload: str) -> None:
        match = _NOTICE.search(payload if payload.startswith(CHANNEL) else f"{CHANNEL}:{payload}")
        if match is None:
            return
        kind, value = match.group(1), match.group(2)
        if kind == "all" or value is None or kind == "account":
            self.flush()
        elif kind == "user":
            self.invalidate_user(uuid.UUID(value))
        elif kind == "jti":
            self.invalidate_jti(uuid.UUID(value))
        elif kind == "inbox":
            self.invalidate_inbox(uuid.UUID(value))

    def apply_notices(self, notices: Iterable[str]) -> None:
        """Notices the writing connection received from the invalidation triggers."""
        notices = list(notices)
        if len(notices) >= PSYCOPG_NOTICE_LIMIT:
            self.flush()  # some may have been dropped
            return
        for notice in notices:
            if CHANNEL in notice:
                self.apply(notice[notice.index(CHANNEL) :].strip())


async def context_cache_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: feed the cache from the pub/sub hub; it serves only while connected.

    A reconnect may have missed invalidations, so the hub's gap signal flushes everything.
    """
    services = app[appkeys.services]
    cache = services.context_cache
    hub = app[appkeys.pubsub]
    subscription = await hub.subscribe(
        CHANNEL, lambda _channel, payload: cache.apply(payload), on_gap=cache.flush
    )
    cache.flush()
    cache.live = hub.is_connected
    cache.enabled = True
    try:
        yield
    finally:
        cache.enabled = False
        cache.flush()
        await hub.unsubscribe(subscription)
