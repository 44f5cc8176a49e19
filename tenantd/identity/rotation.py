"""The good path of a refresh, batched: every renewal that arrives while the previous batch
runs (one at a time, unless it stalls on a lock) shares the next statement.

One statement per batch instead of one per refresh: the client-side cost of a database round
trip (futures, poll callbacks, a pool checkout) and PostgreSQL's per-statement cost are paid
once for the lot. Each row is still decided on its own, by the same conditions as before;
rows are locked in id order, so two batches never wait on each other in a cycle. Anything the
batch does not renew (not renewable, raced, a repeat, the same token twice, a failed batch)
answers None and the caller's locked slow path decides, exactly as for a single statement.
With RATE_LIMIT_ENABLED the requests' rate-limit counters move in the same statement, before
anything is renewed (queries.ROTATE_COUNTED; both statements live in identity/queries.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import uuid
from dataclasses import dataclass

from tenantd.db import Conn, Database, Row
from tenantd.identity import queries
from tenantd.ops.ratelimit import Counter, Verdict

log = logging.getLogger(__name__)

# Enough to fill a turn under heavy load; a larger backlog waits for the next batch.
MAX_BATCH = 64
# One batch at a time: what arrives while it runs forms the next, larger one (fewer
# statements, each with more rows: less CPU a refresh on both sides, and a shorter wait than
# several small statements queued behind each other). A batch still running after
# STALL_SECONDS (waiting on a row lock the locked path or another transaction holds) no
# longer counts, so it holds up nobody else's refresh for longer than that.
MAX_IN_FLIGHT = 1
STALL_SECONDS = 0.02


@dataclass(frozen=True)
class RotationRequest:
    old_hash: bytes
    family_id: uuid.UUID
    new_hash: bytes
    jti: uuid.UUID
    user_agent: str | None
    ip: str | None
    # Rate-limit counters to move with the renewal (none: RATE_LIMIT_ENABLED=false).
    counters: tuple[Counter, ...] = ()


@dataclass(frozen=True)
class Rotation:
    """What a batch did with one request."""

    row: Row | None = None  # the renewed user row (with the successor's expiry)
    counted: bool = False  # its counters moved (whatever else happened)
    verdict: Verdict | None = None  # refused by a limit: counted, not renewed


NOT_HERE = Rotation()  # not renewed, nothing counted: the caller does both on the locked path

_Pending = tuple[RotationRequest, "asyncio.Future[Rotation]"]


class RotationBatcher:
    """Collects renewals and runs them as batched statements on one database."""

    def __init__(self, db: Database, ttl_days: int):
        self.db = db
        self.ttl_days = ttl_days
        self.pending: list[_Pending] = []
        self.pending_hashes: set[bytes] = set()
        self.flushing = 0  # batches scheduled that have not yet taken their requests
        self.running: dict[int, float] = {}  # batches started and not yet answered: when
        self.batches = 0
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def rotate(self, request: RotationRequest) -> Row | None:
        """The renewed user row (with the successor's expiry), or None: not renewed here."""
        return (await self.run(request)).row

    async def run(self, request: RotationRequest) -> Rotation:
        """Renew (and count) `request` in the next batch; NOT_HERE when it cannot join one."""
        if request.old_hash in self.pending_hashes:
            return NOT_HERE  # the same token twice in one batch: the locked path decides
        future: asyncio.Future[Rotation] = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self.pending_hashes.add(request.old_hash)
        self._schedule()
        return await future

    def _schedule(self) -> None:
        """Start the batches the backlog needs (one per MAX_BATCH waiting), while fewer than
        MAX_IN_FLIGHT run that have not stalled: a request arriving meanwhile joins the next
        batch, which starts as soon as one ends (or stalls)."""
        if not self.pending:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        busy = sum(1 for started in self.running.values() if started > now - STALL_SECONDS)
        needed = -(-len(self.pending) // MAX_BATCH) - self.flushing
        for _ in range(min(needed, MAX_IN_FLIGHT - busy)):
            self.batches += 1
            self.running[self.batches] = now
            self.flushing += 1
            task = loop.create_task(self._flush(self.batches))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _flush(self, number: int) -> None:
        batch: list[_Pending] = []
        outcomes: dict[int, Rotation] = {}
        expires_at = dt.datetime.now(dt.UTC)
        stalled = asyncio.get_running_loop().call_later(STALL_SECONDS, self._schedule)
        taken = False
        try:
            async with self.db.connection() as conn:
                # Take what arrived while the previous batch ran: that is the batch.
                batch, taken = self._take(), True
                if batch:
                    expires_at += dt.timedelta(days=self.ttl_days)
                    outcomes = await _run_batch(conn, batch, expires_at)
        except Exception:
            log.warning("batched refresh failed; each renewal falls back", exc_info=True)
            outcomes = {}
        finally:
            stalled.cancel()
            self.running.pop(number, None)
            if not taken:
                batch = self._take()  # never strand a request this batch was meant to run
            for index, (_, future) in enumerate(batch):
                if not future.done():
                    future.set_result(outcomes.get(index, NOT_HERE))
            self._schedule()  # what arrived while this batch ran

    def _take(self) -> list[_Pending]:
        self.flushing -= 1
        batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
        for request, _ in batch:
            self.pending_hashes.discard(request.old_hash)
        return batch


async def _run_batch(
    conn: Conn, batch: list[_Pending], expires_at: dt.datetime
) -> dict[int, Rotation]:
    """One statement for the batch; each request's outcome by its index in `batch`."""
    requests = [request for request, _ in batch]
    counting = any(r.counters for r in requests)
    params = _arrays(batch, expires_at)
    rows = await conn.fetch_all(queries.ROTATE_COUNTED if counting else queries.ROTATE, params)
    renewed: dict[bytes, Row] = {}
    over: dict[int, list[Row]] = {}
    for row in rows:
        if row.get("limited") is not None:
            over.setdefault(row["limited"] - 1, []).append(row)
        else:
            row["expires_at"] = expires_at
            renewed[bytes(row["new_hash"])] = row
    outcomes = {}
    for index, request in enumerate(requests):
        counted = bool(request.counters)
        if index in over:
            outcomes[index] = Rotation(counted=True, verdict=_verdict(request, over[index]))
        else:
            outcomes[index] = Rotation(renewed.get(request.new_hash), counted)
    return outcomes


def _arrays(batch: list[_Pending], expires_at: dt.datetime) -> dict[str, object]:
    """The statement's parameters: one array per column, the counters flattened (`hit`)."""
    requests = [request for request, _ in batch]
    params: dict[str, object] = {
        "old": [r.old_hash for r in requests],
        "family": [r.family_id for r in requests],
        "new": [r.new_hash for r in requests],
        "jti": [r.jti for r in requests],
        "ua": [r.user_agent for r in requests],
        "ip": [r.ip for r in requests],
        "expires": expires_at,
    }
    hits = [(n, c) for n, r in enumerate(requests, 1) for c in r.counters]
    if hits:
        params["hit_n"] = [n for n, _ in hits]
        params["hit_key"] = [c.key for _, c in hits]
        params["hit_secs"] = [c.window for _, c in hits]
        params["hit_limit"] = [c.limit for _, c in hits]
    return params


def _verdict(request: RotationRequest, over: list[Row]) -> Verdict:
    """The refusal `ops.ratelimit.hit` gives for these over-limit counters: the latest
    window end wins (the first counter of the request's on a tie)."""
    offsets = {row["limited_key"]: row["start_offset"] for row in over}
    worst: Verdict | None = None
    for counter in request.counters:
        offset = offsets.get(counter.key)
        if offset is None:
            continue
        retry = max(1, math.ceil(offset + counter.window))
        if worst is None or retry > worst.retry_after:
            worst = Verdict(False, retry, counter.dimension)
    assert worst is not None
    return worst
