"""A claim costs the same whatever the backlog, also when the backlog lands on a queue that
sat empty and vacuumed while its runner polled it (the state every idle instance is in).

Measured in buffer reads of the jobs table, so the check is about work, not wall time: a
claim plan that re-reads the backlog per claimed row (what a generic plan cached on the
empty table did) costs thousands of buffers per job instead of a handful.
"""

from __future__ import annotations

from typing import Any

from tenantd.db import Conn, Database
from tenantd.jobs import queries

BACKLOG = 3000
BATCH = 16


async def jobs_buffer_reads(conn: Conn) -> int:
    # Flush this backend's pending statistics first (PostgreSQL 15+), so the shared
    # counters include every claim made on this connection so far.
    await conn.fetch_val("SELECT pg_stat_force_next_flush()")
    reads: int = await conn.fetch_val(
        "SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)"
        " + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)"
        " FROM pg_statio_user_tables WHERE relname = 'jobs'"
    )
    return reads


async def test_draining_a_sudden_backlog_costs_a_few_buffers_per_job(db: Database) -> None:
    await db.execute("VACUUM ANALYZE jobs")  # empty and vacuumed: the planner sees no rows
    async with db.connection() as conn:
        for _ in range(12):  # an idle runner polling: more than enough to cache a plan
            assert await claim(conn) == 0
        await conn.execute(
            "INSERT INTO jobs (kind, payload)"
            " SELECT 'test.flat', jsonb_build_object('n', n) FROM generate_series(1, %(n)s) n",
            {"n": BACKLOG},
        )
        before = await jobs_buffer_reads(conn)
        claimed = 0
        while count := await claim(conn):
            claimed += count
        after = await jobs_buffer_reads(conn)
    assert claimed == BACKLOG
    per_job = (after - before) / BACKLOG
    assert per_job < 40, f"{per_job:.0f} buffer reads per claimed job"


async def test_claims_take_the_oldest_ready_jobs_first(db: Database) -> None:
    await db.execute(
        "INSERT INTO jobs (kind, payload, run_at) VALUES"
        " ('test.flat', '{\"n\": 1}', now() - interval '1 minute'),"
        " ('test.flat', '{\"n\": 2}', now() - interval '2 minutes'),"
        " ('test.flat', '{\"n\": 3}', now() + interval '1 hour'),"
        " ('test.other', '{\"n\": 4}', now() - interval '3 minutes')"
    )
    async with db.connection() as conn:
        first = await queries.claim_jobs(
            conn, kinds=["test.flat"], worker="w", limit=1, lease_seconds=30
        )
        rest = await queries.claim_jobs(
            conn, kinds=["test.flat"], worker="w", limit=10, lease_seconds=30
        )
    # Oldest first, only the kinds asked for, nothing scheduled for later.
    assert [row["payload"]["n"] for row in first] == [2]
    assert [row["payload"]["n"] for row in rest] == [1]


async def claim(conn: Conn) -> int:
    rows = await queries.claim_jobs(
        conn, kinds=["test.flat"], worker="w", limit=BATCH, lease_seconds=30
    )
    return len(rows)


def plan_nodes(plan: dict[str, Any]) -> list[str]:
    return [plan["Node Type"]] + [
        node for child in plan.get("Plans", []) for node in plan_nodes(child)
    ]


async def test_a_claim_walks_the_ready_index_whatever_the_planner_would_rather_do(
    db: Database,
) -> None:
    """Statistics taken while the queue was near empty make the planner sort the whole
    backlog per claim (a bitmap or sequential scan, then a sort): the claim's own planner
    settings keep it on jobs_ready_idx. Costs skewed against index scans stand in for the
    stale statistics here, with the statistics of an empty queue. The backlog is not
    committed while the plans are made, so autovacuum cannot analyze it in between."""
    await db.execute("VACUUM ANALYZE jobs")
    params = {"kinds": ["test.flat"], "worker": "w", "limit": BATCH, "lease": 30}
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO jobs (kind, payload)"
            " SELECT 'test.flat', jsonb_build_object('n', n) FROM generate_series(1, %(n)s) n",
            {"n": BACKLOG},
        )
        analyzed = await conn.fetch_val("SELECT reltuples FROM pg_class WHERE relname = 'jobs'")
        assert analyzed == 0, "the statistics must be those of an empty queue"
        await conn.execute("SAVEPOINT plans")
        await conn.execute("SET LOCAL random_page_cost = 100")
        unpinned = await conn.fetch_val("EXPLAIN (FORMAT JSON) " + queries.CLAIM_SQL, params)
        await conn.execute(queries.CLAIM_PLAN)
        pinned = await conn.fetch_val("EXPLAIN (FORMAT JSON) " + queries.CLAIM_SQL, params)
        await conn.execute("ROLLBACK TO SAVEPOINT plans")  # the claim below sets its own
        await conn.execute("SET LOCAL random_page_cost = 100")
        rows = await queries.claim_jobs(
            conn, kinds=["test.flat"], worker="w", limit=BATCH, lease_seconds=30
        )
    assert "Sort" in plan_nodes(unpinned[0]["Plan"])  # what the settings are there for
    nodes = plan_nodes(pinned[0]["Plan"])
    assert "Sort" not in nodes and "Bitmap Heap Scan" not in nodes, nodes
    assert [row["payload"]["n"] for row in rows] == list(range(1, BATCH + 1))
