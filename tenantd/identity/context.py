"""In-process cache of the resolved request context, with bounded staleness.

What is cached: the Principal of an access token (keyed by jti, found also by its user and
its session: user, aid, role, after the revocation and cutoff checks), the serialised /me
body (keyed by user and aid), and the user's inbox answers (first pages and unread count).
Also each user's token facts (the user-wide cutoff, and per account the role and whether the
account requires MFA, as the guard's statement last read them) which, with the mirror of
revocations (`Revocations`), answer a token this instance has not seen yet without a
statement (`token_state`).

How it stays correct: database triggers (sql/0070, 0071) announce every write to users,
memberships, accounts, plans, feature overrides, passwords, identities, revoked tokens,
ended sessions (sql/0092: every access token of the session goes) and notifications.
 * Other instances hear it through LISTEN tenantd_cache (delivered on commit, in ms).
 * The writing process sees it as a NOTICE on its own connection and invalidates at once
   (`apply_notices`, called by the db layer after commit), before it answers.
 * A load that raced an invalidation is not stored (generation check).
 * While the process's LISTEN connection (the pub/sub hub) is down the cache is off, and it
   is flushed on reconnect, so staleness is bounded by notification latency, never by
   time-to-live guesses.
 * A LISTEN connection can also die silently (no error, no message). The cache serves only
   while a round trip on it that began less than STALENESS_SECONDS ago has come back (the
   hub makes one every second), so a dead listener turns it off within that bound.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from tenantd.cache.invalidation import CHANNEL, PSYCOPG_NOTICE_LIMIT
from tenantd.identity.revoked import Revocations
from tenantd.principal import Principal

log = logging.getLogger(__name__)

_NOTICE = re.compile(r"tenantd_cache:(user|account|jti|session|inbox|all)(?::([0-9a-f-]{36}))?")
# Several users' inboxes in one announcement (sql/0191): `inboxes:<uuid>,<uuid>,...`.
_INBOXES = re.compile(r"tenantd_cache:inboxes:([0-9a-f,-]*)")


# Memory bounds: a server keeps well under 150 MB with 1,000 SSE clients attached.
MAX_CONTEXTS = 50_000  # principals, and /me bodies (each a few hundred bytes)
INBOX_BUDGET_BYTES = 16 * 1024 * 1024  # cached inbox pages, least recently stored go first
INBOX_CHANGES_KEPT = 20_000  # recent per-user inbox invalidations remembered for races
SMALL_VALUE_BYTES = 64  # what an unread count is charged


# What the cache keeps of a user in one account: role, require_mfa, custom permissions.
Fact = tuple[str | None, bool, tuple[str, ...] | None]


class ContextCache:
    def __init__(
        self,
        max_entries: int = MAX_CONTEXTS,
        inbox_budget_bytes: int = INBOX_BUDGET_BYTES,
        inbox_changes_kept: int = INBOX_CHANGES_KEPT,
    ):
        self.max_entries = max_entries
        self.inbox_budget_bytes = inbox_budget_bytes
        self.inbox_changes_kept = inbox_changes_kept
        self.enabled = False
        # Whether invalidations are reaching us right now (the listener's connection is up).
        self.live: Callable[[], bool] = lambda: True
        self.generation = 0
        self._principals: OrderedDict[uuid.UUID, Principal] = OrderedDict()
        self._jtis_by_user: dict[uuid.UUID, set[uuid.UUID]] = {}
        self._jtis_by_session: dict[uuid.UUID, set[uuid.UUID]] = {}
        self._me: dict[uuid.UUID, dict[uuid.UUID | None, bytes]] = {}
        self._me_count = 0
        # Per user: (tokens_valid_after as epoch seconds or None, per account asked: the role,
        # whether the account requires MFA and a custom role's permissions). A change of any
        # announces `user:` or `account:` (sql/0070, sql/0360).
        self._facts: dict[uuid.UUID, tuple[float | None, dict[uuid.UUID | None, Fact]]] = {}
        self._facts_count = 0
        self.revocations = Revocations()
        # Per-user inbox answers (first pages, unread count), oldest first. They change with
        # every new notification, so races are told apart per user with an inbox clock: a
        # load may store only if no invalidation of its user came after it began. Only the
        # newest invalidations are remembered; the clock of the newest forgotten one is the
        # floor a load must have begun after.
        self._inbox: OrderedDict[uuid.UUID, dict[Hashable, Any]] = OrderedDict()
        self._inbox_bytes = 0
        self._inbox_clock = 0
        self._inbox_changed: OrderedDict[uuid.UUID, int] = OrderedDict()
        self._inbox_floor = 0
        # Told each user whose inbox changed (read-your-writes on replicas keys on it).
        self.on_inbox_change: Callable[[uuid.UUID], None] | None = None
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

    def token_state(
        self,
        user_id: uuid.UUID,
        account_id: uuid.UUID | None,
        jti: uuid.UUID,
        session_id: uuid.UUID | None,
    ) -> tuple[float | None, bool, str | None, bool, tuple[str, ...] | None] | None:
        """What the guard's token-state statement would answer (cutoff, revoked, role,
        require_mfa, a custom role's permissions), from memory; None when that is not known
        here (then it runs)."""
        if not self.serving:
            return None
        facts = self._facts.get(user_id)
        if facts is None:
            return None
        cutoff, roles = facts
        if account_id not in roles:
            return None
        revoked = self.revocations.refuses(jti, session_id)
        if revoked is None:
            return None
        role, require_mfa, custom = roles[account_id]
        return cutoff, revoked, role, require_mfa, custom

    def me_body(self, user_id: uuid.UUID, account_id: uuid.UUID | None) -> bytes | None:
        if not self.serving:
            return None
        bodies = self._me.get(user_id)
        return bodies.get(account_id) if bodies is not None else None

    # writes (only when nothing was invalidated since the load began) ------
    def store_principal(self, principal: Principal, generation: int) -> None:
        if not self.serving or generation != self.generation:
            return
        if len(self._principals) >= self.max_entries:
            old_jti, old = self._principals.popitem(last=False)
            self._forget_jti(old, old_jti)
        self._principals[principal.jti] = principal
        self._jtis_by_user.setdefault(principal.user_id, set()).add(principal.jti)
        if principal.session_id is not None:
            self._jtis_by_session.setdefault(principal.session_id, set()).add(principal.jti)

    def store_facts(
        self,
        user_id: uuid.UUID,
        cutoff: float | None,
        account_id: uuid.UUID | None,
        role: str | None,
        generation: int,
        require_mfa: bool = False,
        role_permissions: tuple[str, ...] | None = None,
    ) -> None:
        """A user's cutoff, role in one account (with a custom role's permissions) and whether
        that account requires MFA, as the token-state statement read them."""
        if not self.serving or generation != self.generation:
            return
        if self._facts_count >= self.max_entries:
            self._facts.clear()
            self._facts_count = 0
        facts = self._facts.get(user_id)
        if facts is None or facts[0] != cutoff:
            self._facts_count -= len(facts[1]) if facts is not None else 0
            facts = self._facts[user_id] = (cutoff, {})
        self._facts_count += account_id not in facts[1]
        facts[1][account_id] = (role, require_mfa, role_permissions)

    def store_me(
        self, user_id: uuid.UUID, account_id: uuid.UUID | None, body: bytes, generation: int
    ) -> None:
        if not self.serving or generation != self.generation:
            return
        if self._me_count >= self.max_entries:
            self._me.clear()
            self._me_count = 0
        bodies = self._me.setdefault(user_id, {})
        self._me_count += account_id not in bodies
        bodies[account_id] = body

    # the inbox: keyed by user, then by what was asked -------------------
    def inbox_version(self, user_id: uuid.UUID) -> tuple[int, int]:
        """Taken before a load; hand it back to store_inbox."""
        return self.generation, self._inbox_clock

    def inbox(self, user_id: uuid.UUID, key: Hashable) -> Any:
        if not self.serving:
            return None
        return self._inbox.get(user_id, {}).get(key)

    def store_inbox(
        self, user_id: uuid.UUID, key: Hashable, value: Any, version: tuple[int, int]
    ) -> None:
        generation, began = version
        if (
            not self.serving
            or generation != self.generation
            or began < self._inbox_floor
            or self._inbox_changed.get(user_id, 0) > began
        ):
            return
        entries = self._inbox.get(user_id)
        if entries is None:
            entries = self._inbox[user_id] = {}
        else:
            self._inbox.move_to_end(user_id)
            self._inbox_bytes -= _inbox_size(entries.get(key))
        entries[key] = value
        self._inbox_bytes += _inbox_size(value)
        while self._inbox_bytes > self.inbox_budget_bytes and self._inbox:
            _, evicted = self._inbox.popitem(last=False)
            self._inbox_bytes -= sum(_inbox_size(v) for v in evicted.values())

    def invalidate_inbox(self, user_id: uuid.UUID) -> None:
        if self.on_inbox_change is not None:
            self.on_inbox_change(user_id)
        self._inbox_clock += 1
        self._inbox_changed[user_id] = self._inbox_clock
        self._inbox_changed.move_to_end(user_id)
        if len(self._inbox_changed) > self.inbox_changes_kept:
            _, forgotten = self._inbox_changed.popitem(last=False)
            self._inbox_floor = max(self._inbox_floor, forgotten)
        entries = self._inbox.pop(user_id, None)
        if entries:
            self._inbox_bytes -= sum(_inbox_size(v) for v in entries.values())

    # invalidation --------------------------------------------------------
    def invalidate_user(self, user_id: uuid.UUID) -> None:
        self.invalidate_inbox(user_id)
        self.generation += 1
        for jti in self._jtis_by_user.pop(user_id, set()):
            principal = self._principals.pop(jti, None)
            if principal is not None:
                self._forget_jti(principal, jti)
        self._me_count -= len(self._me.pop(user_id, {}))
        self._facts_count -= len(self._facts.pop(user_id, (None, {}))[1])

    def invalidate_jti(self, jti: uuid.UUID) -> None:
        self.revocations.revoke_jti(jti)
        self.generation += 1
        principal = self._principals.pop(jti, None)
        if principal is not None:
            self._forget_jti(principal, jti)

    def invalidate_session(self, session_id: uuid.UUID) -> None:
        """Every access token of an ended session (logout, reuse of its refresh token)."""
        self.revocations.end_session(session_id)
        self.generation += 1
        for jti in self._jtis_by_session.pop(session_id, set()):
            principal = self._principals.pop(jti, None)
            if principal is not None:
                self._forget_jti(principal, jti)

    def flush(self) -> None:
        """Account-wide and plan-wide changes touch many users: start over."""
        self.generation += 1
        self._principals.clear()
        self._jtis_by_user.clear()
        self._jtis_by_session.clear()
        self._me.clear()
        self._me_count = 0
        self._facts.clear()
        self._facts_count = 0
        self._inbox.clear()
        self._inbox_bytes = 0

    def _forget_jti(self, principal: Principal, jti: uuid.UUID) -> None:
        """Drop a jti that left the cache from the user and session indexes."""
        indexes = [(self._jtis_by_user, principal.user_id)]
        if principal.session_id is not None:
            indexes.append((self._jtis_by_session, principal.session_id))
        for index, key in indexes:
            jtis = index.get(key)
            if jtis is not None:
                jtis.discard(jti)
                if not jtis:
                    del index[key]

    def apply(self, payload: str) -> None:
        text = payload if payload.startswith(CHANNEL) else f"{CHANNEL}:{payload}"
        listed = _INBOXES.search(text)
        if listed is not None:
            try:
                users = [uuid.UUID(value) for value in listed.group(1).split(",")]
            except ValueError:
                self.flush()  # unreadable: whose inbox changed is unknown
                return
            for user_id in users:
                self.invalidate_inbox(user_id)
            return
        match = _NOTICE.search(text)
        if match is None:
            return
        kind, value = match.group(1), match.group(2)
        if kind == "all" or value is None or kind == "account":
            self.flush()
        elif kind == "user":
            self.invalidate_user(uuid.UUID(value))
        elif kind == "jti":
            self.invalidate_jti(uuid.UUID(value))
        elif kind == "session":
            self.invalidate_session(uuid.UUID(value))
        elif kind == "inbox":
            self.invalidate_inbox(uuid.UUID(value))

    def apply_notices(self, notices: Iterable[str]) -> None:
        """Notices the writing connection received from the invalidation triggers."""
        notices = list(notices)
        if len(notices) >= PSYCOPG_NOTICE_LIMIT:
            self.flush()  # some may have been dropped
            self.revocations.gap()  # a revocation among them too: reload before answering
            return
        for notice in notices:
            if CHANNEL in notice:
                self.apply(notice[notice.index(CHANNEL) :].strip())


def _inbox_size(value: Any) -> int:
    if value is None:
        return 0
    return len(value) if isinstance(value, bytes) else SMALL_VALUE_BYTES
