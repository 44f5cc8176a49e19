"""The mechanism of every in-process cache fed by invalidation announcements; what is cached,
and which announcements drop it, is the business of the domain that owns the cache.

Announcements (cache/invalidation.py) read `<kind>:<id>`, `<kind>:<id>,<id>,...` or `all`.
Each reaches the cache by one of two entry points, shaped alike for every cache:
 * `apply(payload)`: heard on the bus (another instance's commit, or this one's);
 * `apply_notices(notices)`: the writing connection's trigger NOTICEs, after commit, before
   the writer answers (a full list means some were dropped: the cache starts over).

`Announced` holds what every such cache shares: the serving switch (on while its listener
runs and is confirmed alive: `live`), the generation a load takes before it begins (a load
that raced a flush is not stored) and the dispatch of announcements: a kind the cache hears
drops its keys (`drop`), a kind in `FLUSHED_BY` or one whose ids cannot be read empties it.

`KeyedCache` is the generic cache with invalidation by key: values by key (a user) and by
what was asked of that key, within a budget (entries, or bytes with `size`), least recently
stored key first out. Races are told apart per key: a load may store only if no invalidation
of its key came after it began (`version`). Only the newest invalidations are remembered; the
clock of the newest forgotten one is the floor a load must have begun after.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import ClassVar, Generic, TypeVar

from tenantd.cache.invalidation import CHANNEL, PSYCOPG_NOTICE_LIMIT

ALL = "all"
# The announcement in a payload or a NOTICE (which may carry CONTEXT lines after it).
_ANNOUNCEMENT = re.compile(CHANNEL + r":([a-z]+)(?=[:\s]|$)(?::([0-9a-f,-]*))?")

V = TypeVar("V")
Version = tuple[int, int]


@functools.lru_cache(maxsize=256)
def announcement(payload: str) -> tuple[str, tuple[uuid.UUID, ...] | None] | None:
    """The kind and ids of an announcement (ids None: `all`, or ids that cannot be read);
    None when the payload is not one. Every cache of the process reads the same payload in
    turn: it is parsed once."""
    text = payload if payload.startswith(CHANNEL) else f"{CHANNEL}:{payload}"
    match = _ANNOUNCEMENT.search(text)
    if match is None:
        return None
    kind, listed = match.group(1), match.group(2)
    if not listed:
        return kind, None
    try:
        return kind, tuple(uuid.UUID(value) for value in listed.split(","))
    except ValueError:
        return kind, None


class Announced:
    """Base of a cache fed by announcements. Subclasses name the kinds whose keys they drop
    (`HEARS`, handled by `drop`), the kinds that empty them (`FLUSHED_BY`, `all` always),
    and what emptying means (`clear`)."""

    HEARS: ClassVar[frozenset[str]] = frozenset()
    FLUSHED_BY: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.enabled = False
        # Whether invalidations are reaching us right now (the listener's connection is up).
        self.live: Callable[[], bool] = lambda: True
        self.generation = 0

    @property
    def serving(self) -> bool:
        return self.enabled and self.live()

    def drop(self, kind: str, key: uuid.UUID) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Start over: nothing stored is kept, no load under way may store."""
        self.generation += 1
        self.clear()

    def overflowed(self) -> None:
        """The writer's notices overflowed: some announcements were lost."""
        self.flush()

    def apply(self, payload: str) -> None:
        """One announcement, as the bus delivers it (or a NOTICE's text from the channel on)."""
        heard = announcement(payload)
        if heard is None:
            return
        kind, keys = heard
        if kind == ALL or kind in self.FLUSHED_BY:
            self.flush()
        elif kind in self.HEARS:
            if keys is None:
                self.flush()  # unreadable: which keys changed is unknown
                return
            for key in keys:
                self.drop(kind, key)

    def apply_notices(self, notices: Iterable[str]) -> None:
        """Notices the writing connection received from the invalidation triggers."""
        notices = list(notices)
        if len(notices) >= PSYCOPG_NOTICE_LIMIT:
            self.overflowed()  # some may have been dropped
            return
        for notice in notices:
            if CHANNEL in notice:
                self.apply(notice[notice.index(CHANNEL) :].strip())


def _one(_value: object) -> int:
    return 1


class KeyedCache(Announced, Generic[V]):
    """Values by key and by what was asked, dropped per key by the announcements heard."""

    def __init__(
        self,
        budget: int,
        changes_kept: int,
        size: Callable[[V], int] = _one,
    ):
        super().__init__()
        self.budget = budget
        self.changes_kept = changes_kept
        self.size = size
        self._entries: OrderedDict[uuid.UUID, dict[Hashable, V]] = OrderedDict()
        self._used = 0
        self._clock = 0
        self._changed: OrderedDict[uuid.UUID, int] = OrderedDict()
        self._floor = 0

    def version(self) -> Version:
        """Taken before a load; hand it back to `store`."""
        return self.generation, self._clock

    def get(self, key: uuid.UUID, asked: Hashable) -> V | None:
        if not self.serving:
            return None
        entries = self._entries.get(key)
        return entries.get(asked) if entries is not None else None

    def store(self, key: uuid.UUID, asked: Hashable, value: V, version: Version) -> None:
        generation, began = version
        if (
            not self.serving
            or generation != self.generation
            or began < self._floor
            or self._changed.get(key, 0) > began
        ):
            return
        entries = self._entries.get(key)
        if entries is None:
            entries = self._entries[key] = {}
        else:
            self._entries.move_to_end(key)
            old = entries.get(asked)
            if old is not None:
                self._used -= self.size(old)
        entries[asked] = value
        self._used += self.size(value)
        while self._used > self.budget and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._used -= sum(self.size(v) for v in evicted.values())

    def invalidate(self, key: uuid.UUID) -> None:
        self._clock += 1
        self._changed[key] = self._clock
        self._changed.move_to_end(key)
        if len(self._changed) > self.changes_kept:
            _, forgotten = self._changed.popitem(last=False)
            self._floor = max(self._floor, forgotten)
        entries = self._entries.pop(key, None)
        if entries:
            self._used -= sum(self.size(v) for v in entries.values())

    def drop(self, kind: str, key: uuid.UUID) -> None:
        self.invalidate(key)

    def clear(self) -> None:
        self._entries.clear()
        self._used = 0

    def __len__(self) -> int:
        """How many values are held."""
        return sum(len(entries) for entries in self._entries.values())
