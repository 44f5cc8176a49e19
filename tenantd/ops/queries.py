"""Statements of the kernel's operations: sweep bookkeeping and batched deletes, status."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import ColumnElement, Delete, Select

# A row's physical address: the batched delete picks at most one batch of rows by it. Left
# unqualified, it names the table of the SELECT inside and of the DELETE outside.
_CTID: sa.ColumnClause[Any] = sa.column("ctid")


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
