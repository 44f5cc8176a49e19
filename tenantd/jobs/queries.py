"""Statements of the durable job queue; each takes the connection it is given."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import orjson
import sqlalchemy as sa
from psycopg2.extras import Json
from sqlalchemy.sql import ColumnElement, Delete, Select

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.db.fetch import fetch_column
from tenantd.db.tables import jobs


async def insert_job(
    conn: Conn,
    *,
    kind: str,
    payload: dict[str, Any],
    max_attempts: int,
    delay_seconds: float = 0.0,
) -> int:
    job_id: int = await conn.fetch_val(
        "INSERT INTO jobs (kind, payload, max_attempts, run_at)"
        " VALUES (%(kind)s, %(payload)s, %(max)s, now() + make_interval(secs => %(delay)s))"
        " RETURNING id",
        {"kind": kind, "payload": Json(payload), "max": max_attempts, "delay": delay_seconds},
    )
    return job_id


async def insert_jobs(
    conn: Conn,
    *,
    kind: str,
    payloads: Sequence[dict[str, Any]],
    max_attempts: int,
    delays: Sequence[float] | None = None,
) -> list[int]:
    """Many job rows in one statement (a batch send, webhook deliveries), each due after its
    delay (none: now); their ids in the order of `payloads`."""
    if not payloads:
        return []
    if delays is None:
        delays = [0.0] * len(payloads)
    ids = await fetch_column(
        conn,
        "INSERT INTO jobs (kind, payload, max_attempts, run_at)"
        " SELECT %(kind)s, p.payload, %(max)s, now() + make_interval(secs => p.delay)"
        " FROM unnest(%(payloads)s::jsonb[], %(delays)s::float8[]) WITH ORDINALITY"
        " AS p(payload, delay, n) ORDER BY p.n"
        " RETURNING id",
        {
            "kind": kind,
            "payloads": [Json(payload) for payload in payloads],
            "delays": list(delays),
            "max": max_attempts,
        },
    )
    # Ids come from a sequence in insertion order (ORDER BY p.n); sort to pair them safely.
    return sorted(ids)


# One statement on a hot path (notifications' queued send): the job row exists only if its
# user does, so an unknown recipient writes nothing and costs no second round trip.
INSERT_JOB_FOR_USER_SQL = Prepared(
    "tenantd_job_insert_for_user",
    "INSERT INTO jobs (kind, payload, max_attempts)"
    " SELECT %(kind)s::text, %(payload)s::jsonb, %(max)s::int"
    " WHERE EXISTS (SELECT 1 FROM users WHERE id = %(uid)s::uuid) RETURNING id",
)


async def insert_job_for_user(
    conn: Conn, *, kind: str, payload: dict[str, Any], max_attempts: int, user_id: uuid.UUID
) -> int | None:
    """Insert the job only if user `user_id` exists; its id, or None (no such user)."""
    job_id: int | None = await conn.fetch_val(
        INSERT_JOB_FOR_USER_SQL,
        {"kind": kind, "payload": Json(payload), "max": max_attempts, "uid": user_id},
    )
    return job_id


# The group commit of `enqueue(..., for_user=)` (jobs/coalesce.py): many callers' rows in one
# statement, each written only if its user exists. Rows keep their order (ORDER BY n), so
# the sequence hands out ids in that order and the sorted ids pair with the written rows.
INSERT_JOBS_FOR_USERS_SQL = Prepared(
    "tenantd_jobs_insert_for_users",
    """
WITH p AS (
    SELECT * FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(maxes)s::int[],
                         %(uids)s::uuid[]) WITH ORDINALITY AS p(kind, payload, max, uid, n)
     WHERE EXISTS (SELECT 1 FROM users WHERE users.id = p.uid)
), ins AS (
    INSERT INTO jobs (kind, payload, max_attempts)
    SELECT kind, payload::jsonb, max FROM p ORDER BY n
    RETURNING id
)
SELECT (SELECT array_agg(n ORDER BY n) FROM p) AS written,
       (SELECT array_agg(id ORDER BY id) FROM ins) AS ids
""",
)


async def insert_jobs_for_users(
    conn: Conn, *, rows: Sequence[tuple[str, dict[str, Any], int, uuid.UUID]]
) -> list[int | None]:
    """(kind, payload, max_attempts, user_id) rows in one statement, each only if its user
    exists: per row its job id, or None (no such user)."""
    found = await conn.fetch_one(
        INSERT_JOBS_FOR_USERS_SQL,
        {
            "kinds": [row[0] for row in rows],
            # text, made jsonb by the statement (a prepared statement takes no Json array)
            "payloads": [orjson.dumps(row[1]).decode() for row in rows],
            "maxes": [row[2] for row in rows],
            "uids": [row[3] for row in rows],
        },
    )
    ids: list[int | None] = [None] * len(rows)
    if found is not None and found["written"]:
        for n, job_id in zip(found["written"], found["ids"], strict=True):
            ids[n - 1] = job_id
    return ids


# The claim and completion are planned at each call, not prepared: the jobs table swings
# between empty and a large backlog, and a generic plan cached while it was empty (an idle
# runner polls it twice a second) assumes no rows, joins the backlog against itself and
# makes each claim cost O(backlog) row locks. Planning takes ~0.2 ms per batch.
#
# The claim must walk jobs_ready_idx in order (sql/0080) and stop after one batch. Planned
# with statistics taken while the queue was near empty (a drained queue, autoanalyze between
# two bursts), the planner expects a row or two and picks a bitmap scan of the whole backlog
# and a sort: 15-75 ms and every queued row read per claim under a send-batch burst (the
# bench's dominant database cost, and most of its run-to-run swing). Sorts and bitmap scans
# are turned off for this statement alone: SET LOCAL in the same query string lasts until
# the end of its implicit transaction (the runner claims outside a transaction; inside one,
# until that transaction ends). Same rows, same order: only the plan is pinned.
CLAIM_PLAN = "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off;"
CLAIM_SQL = """
UPDATE jobs j
   SET status = 'running', attempts = j.attempts + 1, updated_at = now(),
       locked_until = now() + make_interval(secs => %(lease)s::float8),
       locked_by = %(worker)s::text
 WHERE j.id = ANY(ARRAY(
         SELECT id FROM jobs
          WHERE status = 'queued' AND run_at <= now() AND kind = ANY(%(kinds)s::text[])
          ORDER BY run_at, id
          LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts
"""


async def claim_jobs(
    conn: Conn, *, kinds: Sequence[str], worker: str, limit: int, lease_seconds: int
) -> list[Row]:
    """Lease up to `limit` ready jobs to `worker`, oldest first (SKIP LOCKED: concurrent
    claimers never collide)."""
    return await conn.fetch_all(
        CLAIM_PLAN + CLAIM_SQL,
        {"kinds": list(kinds), "worker": worker, "limit": limit, "lease": lease_seconds},
    )


# Running jobs whose lease ran out, or whose worker is known dead, are queued again, keeping
# their place in line (run_at) and their attempt count; the next claim by any instance takes
# them. A worker is dead when the session it registered (job_workers, kept open for as long as
# it lives) has left pg_stat_activity since the server last started: a kill -9 closes its
# socket and the server ends the session at once, so its jobs run again without waiting out
# the lease. Rows of dead workers go once none of their jobs is still running.
REQUEUE_EXPIRED_SQL = """
WITH dead AS (
    SELECT w.worker FROM job_workers w
     WHERE w.registered_at > pg_postmaster_start_time()
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = w.backend_pid
                          AND (a.backend_start = w.backend_start
                               -- another role's session, its details hidden: the pid is
                               -- enough to count it alive
                               OR a.backend_start IS NULL))
), forgotten AS (
    DELETE FROM job_workers w USING dead
     WHERE w.worker = dead.worker
       AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.status = 'running' AND r.locked_by = w.worker)
)
UPDATE jobs j
   SET status = 'queued', locked_until = NULL, locked_by = NULL, updated_at = now(),
       last_error = CASE WHEN j.locked_until < now()
                         THEN 'lease expired (worker ' || coalesce(j.locked_by, '?') || ')'
                         ELSE 'worker ' || j.locked_by || ' is gone' END
 WHERE j.id = ANY(ARRAY(
         SELECT id FROM jobs
          WHERE status = 'running'
            AND (locked_until < now() OR locked_by IN (SELECT worker FROM dead))
          ORDER BY locked_until
          LIMIT %(limit)s::int
            FOR UPDATE SKIP LOCKED))
   AND j.status = 'running'
   AND (j.locked_until < now() OR j.locked_by IN (SELECT worker FROM dead))
"""


async def requeue_expired(conn: Conn, *, limit: int = 1000) -> int:
    return await conn.execute(REQUEUE_EXPIRED_SQL, {"limit": limit})


# Run on the worker's presence connection itself: the session registered is that one.
REGISTER_WORKER_SQL = """
INSERT INTO job_workers (worker, backend_pid, backend_start)
SELECT %(worker)s::text, pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()
ON CONFLICT (worker) DO UPDATE
   SET backend_pid = excluded.backend_pid, backend_start = excluded.backend_start,
       registered_at = now()
"""


async def register_worker(conn: Conn, *, worker: str) -> None:
    """Record `conn`'s session as the one `worker` keeps open while it lives."""
    await conn.execute(REGISTER_WORKER_SQL, {"worker": worker})


async def unregister_worker(conn: Conn, *, worker: str) -> None:
    await conn.execute("DELETE FROM job_workers WHERE worker = %(w)s", {"w": worker})


COMPLETE_SQL = (
    "UPDATE jobs SET status = 'done', finished_at = now(), updated_at = now(),"
    " locked_until = NULL, last_error = NULL"
    " WHERE id = ANY(%(ids)s::bigint[]) AND locked_by = %(worker)s::text"
    " AND status = 'running'"
)


async def complete_jobs(conn: Conn, *, ids: Sequence[int], worker: str) -> int:
    return await conn.execute(COMPLETE_SQL, {"ids": list(ids), "worker": worker})


async def retry_or_fail_job(
    conn: Conn, *, job_id: int, worker: str, error: str, final: bool, delay_seconds: float
) -> int:
    return await conn.execute(
        "UPDATE jobs SET status = CASE WHEN %(final)s THEN 'failed' ELSE 'queued' END,"
        " run_at = CASE WHEN %(final)s THEN run_at"
        "              ELSE now() + make_interval(secs => %(delay)s) END,"
        " finished_at = CASE WHEN %(final)s THEN now() END,"
        " last_error = %(error)s, locked_until = NULL, locked_by = NULL, updated_at = now()"
        " WHERE id = %(id)s AND locked_by = %(worker)s AND status = 'running'",
        {
            "id": job_id,
            "worker": worker,
            "error": error[:2000],
            "final": final,
            "delay": delay_seconds,
        },
    )


async def extend_leases(conn: Conn, *, ids: Sequence[int], worker: str, lease_seconds: int) -> int:
    return await conn.execute(
        "UPDATE jobs SET locked_until = now() + make_interval(secs => %(lease)s)"
        " WHERE id = ANY(%(ids)s) AND locked_by = %(worker)s AND status = 'running'",
        {"ids": list(ids), "worker": worker, "lease": lease_seconds},
    )


async def release_jobs(conn: Conn, *, ids: Sequence[int], worker: str) -> int:
    """Hand unfinished jobs back (graceful stop): queued again, this attempt not counted."""
    return await conn.execute(
        "UPDATE jobs SET status = 'queued', run_at = now(), locked_until = NULL,"
        " locked_by = NULL, attempts = greatest(attempts - 1, 0), updated_at = now()"
        " WHERE id = ANY(%(ids)s) AND locked_by = %(worker)s AND status = 'running'",
        {"ids": list(ids), "worker": worker},
    )


# --- the jobs sweep ---------------------------------------------------------------------


def finished_before(seconds: float) -> ColumnElement[bool]:
    """Done and failed jobs finished longer ago than `seconds`."""
    return sa.and_(
        jobs.c.status.in_(("done", "failed")),
        jobs.c.finished_at < sa.func.now() - timedelta(seconds=seconds),
    )


def count_jobs(where: ColumnElement[bool]) -> Select[int]:
    return sa.select(sa.func.count()).select_from(jobs).where(where)


def delete_jobs_batch(where: ColumnElement[bool], batch_size: int) -> Delete:
    """DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE where LIMIT batch_size
    FOR UPDATE SKIP LOCKED): a row a runner holds is left for the next sweep."""
    batch = sa.select(jobs.c.id).where(where).limit(batch_size).with_for_update(skip_locked=True)
    return sa.delete(jobs).where(jobs.c.id.in_(batch.scalar_subquery()))


async def cancel_queued_job(conn: Conn, job_id: int) -> bool:
    """Take a job that has not started yet out of the queue (False: running or finished)."""
    count = await conn.execute(
        "UPDATE jobs SET status = 'failed', last_error = 'cancelled', finished_at = now(),"
        " updated_at = now() WHERE id = %(id)s AND status = 'queued'",
        {"id": job_id},
    )
    return count > 0
