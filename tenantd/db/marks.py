"""Whose recent writes a read on a replica must see (read-your-writes), kept in process.

A write notes its caller (any hashable key the caller chooses: a user id, an API key id)
right after its commit. The first read of that caller that would go to a replica asks the
primary for its WAL position (`pg_current_wal_insert_lsn()`, at or past the commit), keeps it
in the mark, and reads on a replica only once the replica has replayed that far (one cheap
`pg_last_wal_replay_lsn()` on the replica's connection per read). A mark lasts MARK_SECONDS
(kept that long, whichever replica answers next); the oldest go first past MAX_MARKS.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

MARK_SECONDS = 60.0
MAX_MARKS = 100_000


class WriteMarks:
    """caller -> (WAL position after its last write, or None until asked; deadline; token)."""

    def __init__(
        self,
        *,
        seconds: float = MARK_SECONDS,
        size: int = MAX_MARKS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.seconds = seconds
        self.size = size
        self.clock = clock
        self._marks: OrderedDict[Hashable, tuple[str | None, float, int]] = OrderedDict()
        self._tokens = itertools.count(1)

    def __len__(self) -> int:
        return len(self._marks)

    def note(self, caller: Hashable) -> None:
        """`caller` just committed a write: its next replica reads must see it."""
        marks = self._marks
        marks[caller] = (None, self.clock() + self.seconds, next(self._tokens))
        marks.move_to_end(caller)
        while len(marks) > self.size:
            marks.popitem(last=False)

    def get(self, caller: Hashable) -> tuple[str | None, int] | None:
        """(position or None, token) of the caller's live mark; None without one."""
        mark = self._marks.get(caller)
        if mark is None:
            return None
        if mark[1] <= self.clock():
            del self._marks[caller]
            return None
        return mark[0], mark[2]

    def resolve(self, caller: Hashable, token: int, position: str) -> None:
        """The primary's position read after the mark `token` was noted."""
        mark = self._marks.get(caller)
        if mark is not None and mark[2] == token:
            self._marks[caller] = (position, mark[1], token)
