"""The mechanism every in-process cache fed by the database shares: the channel its
invalidations travel on, and the staleness rule a cache serves under.

Database triggers announce writes on CHANNEL: other instances hear them through LISTEN
(delivered on commit, in ms); the writing process sees them as NOTICEs on its own connection
(psycopg2 keeps only the newest PSYCOPG_NOTICE_LIMIT: a full list means some were dropped,
and a cache flushes). What each announcement means is the business of the cache that hears it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

CHANNEL = "tenantd_cache"
PSYCOPG_NOTICE_LIMIT = 50  # psycopg2 keeps only the newest 50 notices
STALENESS_SECONDS = 5.0  # the most a served entry may lag a committed write


class Listener(Protocol):
    """The listen connection the cache is fed from (the pub/sub hub)."""

    def confirmed_within(self, seconds: float) -> bool: ...


def live_while_confirmed(
    hub: Listener, bound: float = STALENESS_SECONDS, *, relay: Listener | None = None
) -> Callable[[], bool]:
    """The staleness rule: serve only while a round trip on the listen connection that began
    less than `bound` seconds ago has come back, and (with the process's `relay`, whose
    `confirmed_within` says every announcement committed before a moment has been published
    and delivered) that moment is less than `bound` seconds ago, so no invalidation committed
    before then is still on its way: neither waiting in `announcements` for a relay that
    cannot publish, nor on the bus. Two timestamp comparisons a request."""
    if relay is None:
        return functools.partial(hub.confirmed_within, bound)  # a frame fewer than a lambda
    hub_within, relay_within = hub.confirmed_within, relay.confirmed_within

    def live() -> bool:
        return hub_within(bound) and relay_within(bound)

    return live
