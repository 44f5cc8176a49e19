"""The in-process mirror of every revocation that can still refuse an access token: revoked
token ids (revoked_tokens rows not yet expired) and ended session families (a family with a
revoked row; the guard refuses every token whose `sid` names one).

Why: with it, a token's first request needs no statement when the user's own facts (cutoff,
role) are known to the principal cache: a cold token costs a signature verification (issue 19).

How it stays complete (a revocation missing here would let a revoked token in):
 * The identity layer loads both sets (`begin_load` / `finish_load`) after the listener is
   subscribed, and the principal cache adds every `jti:` and `session:` announcement it hears,
   from NOTIFY (other instances) and from the writing connection's NOTICE (this instance, at
   once). Revocations only ever grow, so the union of a load and what was heard since it
   began is complete, whatever the order.
 * A gap (the listener reconnected, so a NOTIFY may have been lost; or a writer's notices
   overflowed) makes the mirror not ready until a load that began after the gap finishes;
   meanwhile the guard runs the statement. A load that began before a gap is discarded.
 * The principal cache asks it only while it serves (listener up and confirmed recently), the
   same staleness rule as every other cached fact.
Reloads also prune: jtis past their expiry, families whose rows were swept.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

MAX_REVOCATIONS = 200_000  # past this (~30 MB) the mirror stays off and the statement answers


class Revocations:
    def __init__(self, max_entries: int = MAX_REVOCATIONS):
        self.max_entries = max_entries
        self.jtis: set[uuid.UUID] = set()
        self.sessions: set[uuid.UUID] = set()
        self.ready = False
        self.epoch = 0  # bumped by every gap; a load from an older epoch is not trusted
        self.loads = 0
        # What was heard since the running load began (merged into its result).
        self._heard: tuple[set[uuid.UUID], set[uuid.UUID]] | None = None
        # Called when a gap needs a reload (the identity layer's feed sets it).
        self.on_stale: Callable[[], None] = lambda: None

    def refuses(self, jti: uuid.UUID, session_id: uuid.UUID | None) -> bool | None:
        """True when the token is revoked (by jti or session), False when it is not, None
        when the mirror cannot say (not loaded since the last gap)."""
        if not self.ready:
            return None
        return jti in self.jtis or (session_id is not None and session_id in self.sessions)

    # fed by the principal cache ----------------------------------------------
    def revoke_jti(self, jti: uuid.UUID) -> None:
        self.jtis.add(jti)
        if self._heard is not None:
            self._heard[0].add(jti)

    def end_session(self, family_id: uuid.UUID) -> None:
        self.sessions.add(family_id)
        if self._heard is not None:
            self._heard[1].add(family_id)

    def gap(self) -> None:
        """Announcements may have been lost: answer nothing until the next full load."""
        self.ready = False
        self.epoch += 1
        self._heard = None
        self.on_stale()

    # loads -----------------------------------------------------------------
    def begin_load(self) -> int:
        """Call before the load's statements run; hand the result to `finish_load`."""
        self._heard = (set(), set())
        return self.epoch

    def finish_load(
        self, epoch: int, jtis: Iterable[uuid.UUID], sessions: Iterable[uuid.UUID]
    ) -> bool:
        """Replace the sets with a load's rows plus what was heard while it ran; whether
        the mirror answers now."""
        heard, self._heard = self._heard, None
        if epoch != self.epoch or heard is None:
            return False  # a gap came in between: another load follows
        loaded_jtis = set(jtis) | heard[0]
        loaded_sessions = set(sessions) | heard[1]
        if len(loaded_jtis) + len(loaded_sessions) > self.max_entries:
            self.ready = False
            self.jtis, self.sessions = set(), set()
            return False
        self.jtis, self.sessions = loaded_jtis, loaded_sessions
        self.ready = True
        self.loads += 1
        return True

    def stop(self) -> None:
        self.ready = False
        self._heard = None
        self.jtis, self.sessions = set(), set()
