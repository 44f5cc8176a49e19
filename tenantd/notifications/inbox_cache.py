"""In-process cache of users' inbox answers (first pages, unread count), on the kernel's
`cache.keyed` mechanism.

Every write to a user's notifications announces `inbox:<user>` (sql/0071), or one
`inboxes:<user>,<user>,...` per statement (sql/0191); a user's own change (`user:`) drops
theirs too, an account's (`account:`) or `all` empties the cache. The answers change with
every new notification, so races are told apart per user: a load stores only if no
invalidation of its user came after it began. Pages are charged by their bytes, an unread
count a small fixed amount; the least recently stored user goes first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from tenantd.cache.keyed import KeyedCache

# Memory bounds: a server keeps well under 150 MB with 1,000 SSE clients attached.
INBOX_BUDGET_BYTES = 16 * 1024 * 1024  # cached inbox pages, least recently stored go first
INBOX_CHANGES_KEPT = 20_000  # recent per-user inbox invalidations remembered for races
SMALL_VALUE_BYTES = 64  # what an unread count is charged


def charged(value: Any) -> int:
    return len(value) if isinstance(value, bytes) else SMALL_VALUE_BYTES


class InboxCache(KeyedCache[Any]):
    """Per user: first pages (serialised, by status and limit) and the unread count."""

    HEARS = frozenset({"inbox", "inboxes", "user"})
    FLUSHED_BY = frozenset({"account"})

    def __init__(
        self,
        budget_bytes: int = INBOX_BUDGET_BYTES,
        changes_kept: int = INBOX_CHANGES_KEPT,
    ):
        super().__init__(budget=budget_bytes, changes_kept=changes_kept, size=charged)
        # Told each user whose inbox changed (read-your-writes on replicas keys on it).
        self.on_change: Callable[[uuid.UUID], None] | None = None

    def invalidate(self, key: uuid.UUID) -> None:
        if self.on_change is not None:
            self.on_change(key)
        super().invalidate(key)
