"""Statements of the kernel's operations: sweeps (bookkeeping, batched deletes), rate limits,
metrics and `tenantd status`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func
from sqlalchemy.sql import ColumnElement, Delete, Select

from tenantd.db import tables

# A row's physical address: the batched delete picks at most one batch of rows by it. Left
# unqualified, it names the table of the SELECT inside and of the DELETE outside.
_CTID: sa.ColumnClause[Any] = sa.column("ctid")


# What a sweep deletes in batches: a table and a Core condition over it (`delete_batches`).
Purge = tuple[sa.Table, ColumnElement[bool]]


def count_rows(table: sa.Table, where: ColumnElement[bool]) -> Select[int]:
    """SELECT count(*) FROM table WHERE where (a sweep's dry run)."""
    return sa.select(sa.func.count()).select_from(table).where(where)


def delete_batch(table: sa.Table, where: ColumnElement[bool], batch_size: int) -> Delete:
    """DELETE FROM table WHERE ctid = ANY(ARRAY(SELECT ctid FROM table WHERE where
    LIMIT batch_size)) AND where: one short statement, at most batch_size rows."""
    batch = sa.select(_CTID).select_from(table).where(where).limit(batch_size).correlate(None)
    return sa.delete(table).where(sa.any_(sa.func.array(batch.scalar_subquery())) == _CTID, where)


# --- the sweep runner -------------------------------------------------------------------

TRY_LOCK = "SELECT pg_try_advisory_lock(%(c)s, %(k)s)"
UNLOCK = "SELECT pg_advisory_unlock(%(c)s, %(k)s)"

# The scheduler's runs: record a start unless the last one is younger than the interval.
START_RUN = """
INSERT INTO sweep_runs AS r (name, run_count, last_started_at, last_status, last_instance)
VALUES (%(name)s, 1, now(), 'running', %(instance)s)
ON CONFLICT (name) DO UPDATE SET
    run_count = r.run_count + 1,
    last_started_at = now(),
    last_status = 'running',
    last_instance = excluded.last_instance
WHERE %(interval)s::float8 IS NULL
   OR r.last_started_at IS NULL
   OR r.last_started_at <= now() - make_interval(secs => %(interval)s::float8)
RETURNING run_count
"""

FINISH_RUN = """
UPDATE sweep_runs SET
    last_finished_at = now(),
    last_status = %(status)s,
    last_counts = %(counts)s,
    last_error = %(error)s,
    last_success_at = CASE WHEN %(status)s = 'ok' THEN now() ELSE last_success_at END
WHERE name = %(name)s
"""


# --- rate limits (hot path: hand-written, one upsert for every counter of a request) ------

# {values} is filled with one "(%(kN)s, %(wN)s::int)" placeholder pair per counter.
RATE_LIMIT_HIT = """
INSERT INTO rate_limits AS r (key, window_start, count)
SELECT v.key, to_timestamp((floor(extract(epoch FROM now()) / v.secs) * v.secs)::float8), 1
  FROM (VALUES {values}) AS v (key, secs)
 ORDER BY v.key
ON CONFLICT (key) DO UPDATE SET
    count = CASE WHEN r.window_start = excluded.window_start THEN r.count + 1 ELSE 1 END,
    window_start = excluded.window_start
RETURNING r.key, r.count, extract(epoch FROM r.window_start - now())::float8 AS start_offset
"""

# The same counting for a batch of requests, as CTEs that follow the first CTE of a caller's
# statement (the session rotation of tenantd/identity/rotation.py): `hit` lists each
# request's counters (its ordinal `n`), `counted` moves every counter row once by the
# requests counting it (in key order), `over` names each request's counters over their limit.
COUNTING_CTES = """, hit AS (
    SELECT * FROM unnest(%(hit_n)s::int[], %(hit_key)s::text[], %(hit_secs)s::int[],
                         %(hit_limit)s::int[]) AS h(n, key, secs, lim)
), counted AS (
    INSERT INTO rate_limits AS c (key, window_start, count)
    SELECT h.key,
           to_timestamp((floor(extract(epoch FROM now()) / max(h.secs)) * max(h.secs))::float8),
           count(*)
      FROM hit h
     GROUP BY h.key
     ORDER BY h.key
    ON CONFLICT (key) DO UPDATE SET
        count = CASE WHEN c.window_start = excluded.window_start
                     THEN c.count + excluded.count ELSE excluded.count END,
        window_start = excluded.window_start
    RETURNING c.key, c.count, extract(epoch FROM c.window_start - now())::float8 AS start_offset
), over AS (
    SELECT h.n, h.key, k.start_offset
      FROM (SELECT h.*, row_number() OVER (PARTITION BY h.key ORDER BY h.n) AS nth,
                   count(*) OVER (PARTITION BY h.key) AS hits
              FROM hit h) h
      JOIN counted k ON k.key = h.key
     WHERE k.count - h.hits + h.nth > h.lim
)"""

# The counts of the current window (one window length for all the keys), counting nothing.
RATE_LIMIT_PEEK = """
SELECT key, count FROM rate_limits
 WHERE key = ANY(%(keys)s)
   AND window_start = to_timestamp((floor(extract(epoch FROM now()) / %(secs)s) * %(secs)s)::float8)
"""


# --- metrics: the database-backed gauges, read in one statement at scrape time ------------

# Taken by the fold and by the TRUNCATE triggers of sql/0094 (metric_counts_forget).
FOLD_LOCK = (735_494, 0)

FOLD_SQL = """
WITH folded AS (DELETE FROM metric_counts RETURNING family, a, b, delta)
INSERT INTO metric_counts (family, a, b, delta)
SELECT family, a, b, sum(delta) FROM folded GROUP BY family, a, b HAVING sum(delta) <> 0
"""

STATE_QUERY = """
SELECT family, a, b, sum(delta)::float8 AS value
  FROM metric_counts GROUP BY family, a, b
UNION ALL
SELECT 'jobs_oldest_queued', '', '',
       COALESCE(extract(epoch FROM now() - min(run_at)), 0)::float8
  FROM jobs WHERE status = 'queued' AND run_at <= now()
UNION ALL
SELECT 'sweep_success', name, '', extract(epoch FROM last_success_at)::float8
  FROM sweep_runs WHERE last_success_at IS NOT NULL
"""


# --- tenantd status -------------------------------------------------------------------------

STATUS_TABLES = (
    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
    " AND tablename IN ('jobs', 'sweep_runs')"
)
STATUS_QUEUE = """
SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
       count(*) FILTER (WHERE status = 'queued' AND run_at <= now()) AS due,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'failed') AS failed
  FROM jobs WHERE status IN ('queued', 'running', 'failed')
"""
STATUS_SWEEPS = """
SELECT name, run_count, last_status, last_started_at, last_success_at, last_counts
  FROM sweep_runs ORDER BY name
"""


# --- the instances table (ops/instances.py) -------------------------------------------

STALE_AFTER_BEATS = 3  # a heartbeat older than three intervals: the instance is gone
PRUNE_AFTER = "1 day"  # stale rows older than this are deleted when a server starts

REGISTER_INSTANCE = """
INSERT INTO instances AS i
    (instance, host, pid, listen, version, heartbeat_seconds, switches, event_types)
VALUES (%(instance)s, %(host)s, %(pid)s, %(listen)s, %(version)s, %(interval)s,
        %(switches)s, %(event_types)s)
ON CONFLICT (instance) DO UPDATE SET
    heartbeat_at = now(),
    heartbeat_seconds = EXCLUDED.heartbeat_seconds,
    switches = EXCLUDED.switches,
    event_types = EXCLUDED.event_types
"""
UNREGISTER_INSTANCE = "DELETE FROM instances WHERE instance = %(instance)s"
PRUNE_INSTANCES = f"""
DELETE FROM instances
WHERE heartbeat_at < now() - interval '{PRUNE_AFTER}'
  AND heartbeat_at < now() - make_interval(secs => {STALE_AFTER_BEATS} * heartbeat_seconds)
"""
LIST_INSTANCES = f"""
SELECT instance, host, pid, listen, version, started_at, heartbeat_at, heartbeat_seconds,
       switches, event_types,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age,
       heartbeat_at < now() - make_interval(secs => {STALE_AFTER_BEATS} * heartbeat_seconds)
           AS stale
FROM instances
ORDER BY started_at, instance
"""
HAS_INSTANCES_TABLE = "SELECT to_regclass('instances') IS NOT NULL"


def counters_ended_before(window: timedelta) -> Purge:
    """Rate-limit counters whose window began longer than `window` ago (the session sweep)."""
    return tables.rate_limits, tables.rate_limits.c.window_start < func.now() - window


# Fold metric_counts rows (tenantd/ops/metrics.py), one instance at a time.
TRY_FOLD_LOCK = "SELECT pg_try_advisory_xact_lock(%(a)s, %(b)s)"
