"""The read-replica figures (issue 31): inbox reads with and without a streaming replica.

`inbox_reads_primary` and `inbox_reads_replica` are the same load against two servers of the
same run: one reading from the primary only, one with `DATABASE_REPLICA_URLS` naming a
replica cloned from the bench's private cluster by `pg_basebackup -R` (about a minute at
`--scale 1`; `BENCH_REPLICA_URL` names one of your own when `BENCH_DATABASE_URL` is set).

The request is the inbox page after a cursor far in the future: the same 20 newest rows as
the first page, but a cursor page is never answered from the context cache, so every request
reads the database (the first-page figure, `notifications_list`, mostly measures the cache).
On one machine the replica competes with the primary for the same cores: the ratio between
the two figures is the cost of a read routed to a replica, not the headroom a replica on its
own host gives.
"""

from __future__ import annotations

import datetime as dt
import shutil
import uuid
from pathlib import Path

import psycopg2

from bench.private_servers import base_backup
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster
from tenantd.web.cursors import encode_keyset as encode_cursor

FIGURES = ("inbox_reads_primary", "inbox_reads_replica")


def inbox_path() -> str:
    """A first page's rows, read past the cache: a cursor before which everything lies."""
    cursor = encode_cursor(dt.datetime(2999, 1, 1, tzinfo=dt.UTC), uuid.UUID(int=2**128 - 1))
    return f"/api/v1/notifications?limit=20&cursor={cursor}"


def build_replica(primary: EmbeddedCluster, root: Path) -> EmbeddedCluster:
    """A fresh streaming replica of `primary` under `root`, started (its own socket folder)."""
    replica = EmbeddedCluster(root, options="-c shared_buffers=512MB")
    replica.stop()
    shutil.rmtree(replica.data, ignore_errors=True)
    base_backup(primary, replica)
    return replica


def served_inbox(replica_url: str) -> bool:
    """Whether the replica ran the inbox statement (its pooled connections' last statement)."""
    conn = psycopg2.connect(url_to_dsn(replica_url))
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%tenantd_inbox_%%'"
                " AND pid <> pg_backend_pid()"
            )
            row = cursor.fetchone()
            return bool(row and row[0])
    finally:
        conn.close()
