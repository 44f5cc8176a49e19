"""The good path of a refresh, batched: every renewal that arrives while the previous batch
waits for a pooled connection (or in the same event-loop turn) shares one statement.

One statement per batch instead of one per refresh: the client-side cost of a database round
trip (futures, poll callbacks, a pool checkout) and PostgreSQL's per-statement cost are paid
once for the lot. Each row is still decided on its own, by the same conditions as before;
rows are locked in id order, so two batches never wait on each other in a cycle. Anything the
batch does not renew (not renewable, raced, a repeat, the same token twice, a failed batch)
answers None and the caller's locked slow path decides, exactly as for a single statement.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
import weakref
from dataclasses import dataclass

from tenantd.db import Database, Row
from tenantd.db.core import Prepared
from tenantd.identity import queries

log = logging.getLogger(__name__)

# Per renewal: lock the presented session while it is renewable (not revoked, rotated or
# expired; its family not ended; created after the user's cutoff; its aid membership active
# and, where the account requires MFA, the user has a factor), mark it rotated, drop the
# family's rows rotated out before it (skipping rows a repeat holds), insert the successor,
# return the user. A concurrent second use waits on the lock, re-checks, finds it rotated and
# returns nothing for that row.
ROTATE = Prepared(
    "tenantd_rotate_sessions",
    f"""
WITH req AS (
    SELECT * FROM unnest(%(old)s::bytea[], %(family)s::uuid[], %(new)s::bytea[],
                         %(jti)s::uuid[], %(ua)s::text[], %(ip)s::text[])
               AS r(old, family, new, jti, ua, ip)
), old AS (
    SELECT s.id, s.family_id, s.user_id, s.account_id,
           COALESCE(s.signed_in_at, s.created_at) AS signed_in_at, s.method,
           r.new, r.jti, r.ua, r.ip
      FROM req r
      JOIN sessions s ON s.token_hash = r.old AND s.family_id = r.family
      JOIN users u ON u.id = s.user_id
     WHERE s.revoked_at IS NULL AND s.rotated_at IS NULL AND s.expires_at > now()
       AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)
       AND NOT EXISTS (SELECT 1 FROM sessions f
                        WHERE f.family_id = s.family_id AND f.revoked_at IS NOT NULL)
       AND (s.account_id IS NULL OR EXISTS (
            SELECT 1 FROM {queries.ACTIVE_MEMBERSHIPS}
               AND m.user_id = s.user_id AND m.account_id = s.account_id
               AND (u.mfa_enabled OR NOT a.require_mfa)))
     ORDER BY s.id
       FOR UPDATE OF s
), rotated AS (
    UPDATE sessions SET rotated_at = now() FROM old WHERE sessions.id = old.id
    RETURNING old.*
), pruned AS (
    DELETE FROM sessions WHERE id IN (
        SELECT p.id FROM sessions p JOIN rotated r ON p.family_id = r.family_id
         WHERE p.id <> r.id AND p.rotated_at IS NOT NULL AND p.revoked_at IS NULL
           FOR UPDATE OF p SKIP LOCKED)
), issued AS (
    INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at, access_jti,
                          user_agent, ip, signed_in_at, method)
    SELECT family_id, user_id, account_id, new, %(expires)s::timestamptz, jti, ua, ip,
           signed_in_at, method
      FROM rotated
    RETURNING user_id, account_id, family_id, token_hash
)
SELECT i.token_hash AS new_hash, u.id, u.email, u.first_name, u.last_name,
       u.email_verified_at, i.account_id, sa.amr, sa.auth_time
  FROM issued i JOIN users u ON u.id = i.user_id
  LEFT JOIN session_auth sa ON sa.family_id = i.family_id
""",
)

# Enough to fill a turn under heavy load; a larger backlog waits for the next batch.
MAX_BATCH = 64


@dataclass(frozen=True)
class RotationRequest:
    old_hash: bytes
    family_id: uuid.UUID
    new_hash: bytes
    jti: uuid.UUID
    user_agent: str | None
    ip: str | None


class RotationBatcher:
    """Collects renewals and runs them as batched statements on one database."""

    def __init__(self, db: Database, ttl_days: int):
        self.db = db
        self.ttl_days = ttl_days
        self.pending: list[tuple[RotationRequest, asyncio.Future[Row | None]]] = []
        self.flushing = 0  # batches scheduled that have not yet taken their requests
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def rotate(self, request: RotationRequest) -> Row | None:
        """The renewed user row (with the successor's expiry), or None: not renewed here."""
        if any(pending.old_hash == request.old_hash for pending, _ in self.pending):
            return None  # the same token twice in one batch: the locked path decides
        future: asyncio.Future[Row | None] = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        if self.flushing == 0 or len(self.pending) > MAX_BATCH * self.flushing:
            self.flushing += 1
            task = asyncio.get_running_loop().create_task(self._flush())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return await future

    async def _flush(self) -> None:
        batch: list[tuple[RotationRequest, asyncio.Future[Row | None]]] = []
        rows: list[Row] = []
        expires_at = dt.datetime.now(dt.UTC)
        taken = False
        try:
            async with self.db.connection() as conn:
                # Take what arrived while the pool was busy: that is the batch.
                batch, taken = self._take(), True
                if batch:
                    expires_at += dt.timedelta(days=self.ttl_days)
                    rows = await conn.fetch_all(ROTATE, _arrays(batch, expires_at))
        except Exception:
            log.warning("batched refresh failed; each renewal falls back", exc_info=True)
            rows = []
        finally:
            if not taken:
                batch = self._take()  # never strand a request this batch was meant to run
            by_hash = {bytes(row["new_hash"]): row for row in rows}
            for request, future in batch:
                row = by_hash.get(request.new_hash)
                if row is not None:
                    row["expires_at"] = expires_at
                if not future.done():
                    future.set_result(row)

    def _take(self) -> list[tuple[RotationRequest, asyncio.Future[Row | None]]]:
        self.flushing -= 1
        batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
        return batch


def _arrays(
    batch: list[tuple[RotationRequest, asyncio.Future[Row | None]]], expires_at: dt.datetime
) -> dict[str, object]:
    requests = [request for request, _ in batch]
    return {
        "old": [r.old_hash for r in requests],
        "family": [r.family_id for r in requests],
        "new": [r.new_hash for r in requests],
        "jti": [r.jti for r in requests],
        "ua": [r.user_agent for r in requests],
        "ip": [r.ip for r in requests],
        "expires": expires_at,
    }


_BATCHERS: weakref.WeakKeyDictionary[Database, RotationBatcher] = weakref.WeakKeyDictionary()


def batcher_for(db: Database, ttl_days: int) -> RotationBatcher:
    batcher = _BATCHERS.get(db)
    if batcher is None or batcher.ttl_days != ttl_days:
        batcher = _BATCHERS[db] = RotationBatcher(db, ttl_days)
    return batcher
