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
 * While the listener is disconnected the cache is off, and it is flushed on reconnect, so
   staleness is bounded by notification latency, never by time-to-live guesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Iterable
from typing import Any

import aiopg
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

    # reads ---------------------------------------------------------------
    def principal(self, jti: uuid.UUID) -> Principal | None:
        if not self.enabled:
            return None
        found = self._principals.get(jti)
        if found is None or found.expires_at <= time.time():
            self.misses += 1
            return None
        self.hits += 1
        return found

    def me_body(self, user_id: uuid.UUID, account_id: uuid.UUID | None) -> bytes | None:
        if not self.enabled:
            return None
        return self._me.get((user_id, account_id))

    # writes (only when nothing was invalidated since the load began) ------
    def store_principal(self, principal: Principal, generation: int) -> None:
        if not self.enabled or generation != self.generation:
            return
        if len(self._principals) >= self.max_entries:
            old_jti, old = self._principals.popitem(last=False)
            self._jtis_by_user.get(old.user_id, set()).discard(old_jti)
        self._principals[principal.jti] = principal
        self._jtis_by_user.setdefault(principal.user_id, set()).add(principal.jti)

    def store_me(
        self, user_id: uuid.UUID, account_id: uuid.UUID | None, body: bytes, generation: int
    ) -> None:
        if not self.enabled or generation != self.generation:
            return
        if len(self._me) >= self.max_entries:
            self._me.clear()
        self._me[(user_id, account_id)] = body

    # the inbox: keyed by user, then by what was asked -------------------
    def inbox_version(self, user_id: uuid.UUID) -> tuple[int, int]:
        return self.generation, self._inbox_generation.get(user_id, 0)

    def inbox(self, user_id: uuid.UUID, key: Hashable) -> Any:
        if not self.enabled:
            return None
        return self._inbox.get(user_id, {}).get(key)

    def store_inbox(
        self, user_id: uuid.UUID, key: Hashable, value: Any, version: tuple[int, int]
    ) -> None:
        if not self.enabled or version != self.inbox_version(user_id):
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


class CacheListener:
    """One LISTEN connection; the cache is enabled only while it is connected."""

    def __init__(self, dsn: str, cache: ContextCache):
        self.dsn = dsn
        self.cache = cache
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with aiopg.connect(self.dsn, enable_hstore=False) as conn:
                    async with conn.cursor() as cur:
                        await cur.execute(f"LISTEN {CHANNEL}")
                    self.cache.flush()
                    self.cache.enabled = True
                    self.connected.set()
                    delay = 0.1
                    while True:
                        message = await conn.notifies.get()
                        self.cache.apply(message.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # connection lost: stop trusting the cache
                log.warning("context cache listener disconnected: %s", type(error).__name__)
            finally:
                self.cache.enabled = False
                self.cache.flush()
                self.connected.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def start(self, wait: float = 5.0) -> None:
        self._task = asyncio.create_task(self._run(), name="context-cache-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connected.wait(), wait)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@contextlib.asynccontextmanager
async def running_cache(dsn: str) -> AsyncIterator[ContextCache]:
    cache = ContextCache()
    listener = CacheListener(dsn, cache)
    await listener.start()
    try:
        yield cache
    finally:
        await listener.stop()


async def context_cache_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: listen for invalidations; the cache serves only while listening."""
    services = app[appkeys.services]
    listener = CacheListener(services.db.pool._dsn, services.context_cache)
    await listener.start()
    try:
        yield
    finally:
        await listener.stop()
