"""A private primary and a streaming replica of it (`pg_basebackup -R`), for the read-replica
tests: the replica's replay paused and resumed, the replica stopped and started, from the
test. Built once per test module (initdb, the migrations and the base backup take seconds)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster, find_pg_bin
from tenantd.db.migrate import migrate

# The private clusters turn synchronous_commit off; a primary with replicas commits as a
# production one does (a commit's WAL flushed, so sent to the replica, before it returns).
PRIMARY_OPTIONS = "-c synchronous_commit=on -c wal_level=replica -c max_wal_senders=5"


class ReplicaPair:
    """The primary, its replica, and what a test does to the replica."""

    def __init__(self, root: Path):
        self.primary = EmbeddedCluster(root / "primary", options=PRIMARY_OPTIONS)
        self.replica = EmbeddedCluster(root / "replica")

    @property
    def url(self) -> str:
        return self.primary.url

    @property
    def replica_url(self) -> str:
        return self.replica.url

    def build(self) -> None:
        """Start the primary, migrate it, clone it with pg_basebackup -R, start the clone.

        initdb's pg_hba (--auth=trust) lets local connections replicate; wal_level=replica
        and max_wal_senders are set above (PostgreSQL 15's defaults already allow it)."""
        self.primary.start()
        asyncio.run(_migrate(self.url))
        self.replica._prepare_dirs()
        result = self.replica._run(
            [
                str(find_pg_bin() / "pg_basebackup"),
                "-h",
                str(self.primary.socket_dir),
                "-U",
                "postgres",
                "-D",
                str(self.replica.data),
                "-R",  # standby.signal and primary_conninfo: a streaming replica
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
            check=False,
        )
        assert result.returncode == 0, result.stderr
        self.replica.start()

    def query(self, cluster: EmbeddedCluster, sql: str) -> object:
        """One statement on `cluster` (its own connection); the first column of the first row."""
        conn = psycopg2.connect(host=str(cluster.socket_dir), user="postgres", dbname="tenantd")
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql)
                row = cursor.fetchone() if cursor.description else None
                return None if row is None else row[0]
        finally:
            conn.close()

    def pause_replay(self) -> None:
        self.query(self.replica, "SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.query(self.replica, "SELECT pg_wal_replay_resume()")

    def caught_up(self) -> bool:
        """Whether the replica has replayed everything the primary has flushed now."""
        position = self.query(self.primary, "SELECT pg_current_wal_flush_lsn()::text")
        return bool(
            self.query(self.replica, f"SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn")
        )

    @contextlib.contextmanager
    def replay_paused(self) -> Iterator[None]:
        self.pause_replay()
        try:
            yield
        finally:
            self.resume_replay()

    @contextlib.contextmanager
    def replica_stopped(self) -> Iterator[None]:
        self.replica.stop()
        try:
            yield
        finally:
            self.replica.start()

    def replica_statements(self) -> list[str]:
        """The last statement of every client connection on the replica but this one."""
        conn = psycopg2.connect(
            host=str(self.replica.socket_dir), user="postgres", dbname="tenantd"
        )
        conn.autocommit = True
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT query FROM pg_stat_activity"
                    " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                )
                return [row[0] for row in cursor.fetchall()]
        finally:
            conn.close()

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()


async def _migrate(url: str) -> None:
    db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
    try:
        await migrate(db)
    finally:
        await db.close()


@pytest.fixture(scope="module")
def replica_pair() -> Iterator[ReplicaPair]:
    """A migrated primary and its streaming replica, of this module's own."""
    root = Path(tempfile.mkdtemp(prefix="tenantd-replica-"))
    pair = ReplicaPair(root)
    try:
        pair.build()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
