"""In-process cache of resolved access tokens, with bounded staleness (the kernel's
`cache.keyed` mechanism: serving switch, generation, announcements in).

What is cached: the Principal of an access token (keyed by jti, found also by its user and
its session: user, aid, role, after the revocation and cutoff checks), and each user's token
facts (the user-wide cutoff, and per account the role and whether the account requires MFA,
as the guard's statement last read them) which, with the mirror of revocations
(`Revocations`), answer a token this instance has not seen yet without a statement
(`token_state`). The /me bodies are cached by accounts (`accounts.me.MeCache`), the inbox
answers by notifications (`notifications.inbox_cache.InboxCache`), each the same way.

How it stays correct: database triggers (sql/0070, 0092, 0360) announce every write to
users, memberships, accounts, plans, feature overrides, passwords, identities, revoked tokens
and ended sessions (sql/0092: every access token of the session goes).
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

import time
import uuid
from collections import OrderedDict

from tenantd.cache.keyed import Announced
from tenantd.identity.revoked import Revocations
from tenantd.principal import Principal

# Memory bounds: a server keeps well under 150 MB with 1,000 SSE clients attached.
MAX_PRINCIPALS = 50_000  # principals, and users' token facts (each a few hundred bytes)


# What the cache keeps of a user in one account: role, require_mfa, custom permissions.
Fact = tuple[str | None, bool, tuple[str, ...] | None]


class PrincipalCache(Announced):
    """Principals by jti, and users' token facts; `user:`, `jti:` and `session:` drop what
    they name, `account:` and `all` (or an unreadable id) empty it."""

    HEARS = frozenset({"user", "jti", "session"})
    FLUSHED_BY = frozenset({"account"})

    def __init__(self, max_entries: int = MAX_PRINCIPALS):
        super().__init__()
        self.max_entries = max_entries
        self._principals: OrderedDict[uuid.UUID, Principal] = OrderedDict()
        self._jtis_by_user: dict[uuid.UUID, set[uuid.UUID]] = {}
        self._jtis_by_session: dict[uuid.UUID, set[uuid.UUID]] = {}
        # Per user: (tokens_valid_after as epoch seconds or None, per account asked: the role,
        # whether the account requires MFA and a custom role's permissions). A change of any
        # announces `user:` or `account:` (sql/0070, sql/0360).
        self._facts: dict[uuid.UUID, tuple[float | None, dict[uuid.UUID | None, Fact]]] = {}
        self._facts_count = 0
        self.revocations = Revocations()
        self.hits = 0
        self.misses = 0

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

    # invalidation --------------------------------------------------------
    def invalidate_user(self, user_id: uuid.UUID) -> None:
        self.generation += 1
        for jti in self._jtis_by_user.pop(user_id, set()):
            principal = self._principals.pop(jti, None)
            if principal is not None:
                self._forget_jti(principal, jti)
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

    def drop(self, kind: str, key: uuid.UUID) -> None:
        if kind == "user":
            self.invalidate_user(key)
        elif kind == "jti":
            self.invalidate_jti(key)
        else:
            self.invalidate_session(key)

    def clear(self) -> None:
        """Account-wide and plan-wide changes touch many users: start over."""
        self._principals.clear()
        self._jtis_by_user.clear()
        self._jtis_by_session.clear()
        self._facts.clear()
        self._facts_count = 0

    def overflowed(self) -> None:
        self.flush()
        self.revocations.gap()  # a revocation among the lost ones too: reload before answering

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
