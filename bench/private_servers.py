"""Servers of a run's own, for the bench harnesses and the tests: a free port, a migrated
database, a PostgreSQL primary with a streaming replica (`pg_basebackup -R`), a nats-server or
redis-server on its own port (the shared ones on 4222 and 6379 are never killed).

In bench/, not tests/: the tests already import bench (tests/cluster, tests/perf) and bench
never imports tests, so this module imports neither tests nor pytest (the fixtures that build
these servers stay in tests/)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster, find_pg_bin
from tenantd.db.migrate import migrate

WITHIN = 300.0  # seconds: what must happen gets this long, the machine may be busy
NATS = "/usr/sbin/nats-server"
# The private clusters turn synchronous_commit off; a primary with replicas commits as a
# production one does (a commit's WAL flushed, so sent to the replica, before it returns).
PRIMARY_OPTIONS = "-c synchronous_commit=on -c wal_level=replica -c max_wal_senders=5"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until(check: Callable[[], Any], what: str, within: float = WITHIN) -> None:
    """Poll `check` (sync or async) until it is true; an error naming `what` past `within`."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not in {within:.0f} s: {what}")
        await asyncio.sleep(0.05)


async def migrate_url(url: str) -> None:
    """Apply the shipped migrations to the database at `url`."""
    db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
    try:
        await migrate(db)
    finally:
        await db.close()


def base_backup(primary: EmbeddedCluster, replica: EmbeddedCluster) -> None:
    """Clone `primary` into `replica`'s (empty) data folder as a streaming replica and start it.

    initdb's pg_hba (--auth=trust) lets local connections replicate; the primary needs
    wal_level=replica and max_wal_senders (PRIMARY_OPTIONS; PostgreSQL 15's defaults allow it)."""
    replica._prepare_dirs()
    result = replica._run(
        [
            str(find_pg_bin() / "pg_basebackup"),
            *("-h", str(primary.socket_dir), "-U", "postgres", "-D", str(replica.data)),
            "-R",  # standby.signal and primary_conninfo: a streaming replica
            *("-X", "stream", "-c", "fast", "--no-sync"),
        ],
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pg_basebackup failed: {result.stderr.strip()}")
    replica.start()


class ReplicaPair:
    """A migrated primary, its streaming replica, and what a run does to the replica."""

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
        """Start the primary, migrate it, clone it, start the clone."""
        self.primary.start()
        asyncio.run(migrate_url(self.url))
        base_backup(self.primary, self.replica)

    def query(self, cluster: EmbeddedCluster, sql: str) -> Any:
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


class PrivateServer:
    """A nats-server (JetStream on, its store kept over restarts) or redis-server of a run
    alone, on its own port. A plain child process, not an asyncio one: a harness may start it
    in one event loop and kill it in another."""

    def __init__(self, kind: str, store: Path | None = None, log: Path | None = None):
        self.kind = kind
        self.port = free_port()
        self.store = store or Path(tempfile.mkdtemp(prefix="tenantd-nats-"))
        self.log = log  # where its output goes (appended); none: discarded
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.kind == "nats":
            return f"nats://127.0.0.1:{self.port}"
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        if self.kind == "nats":
            return [
                NATS, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store),
            ]  # fmt: skip
        return [
            "redis-server",
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no",
        ]  # fmt: skip

    async def start(self, within: float = 20.0) -> None:
        self.spawn()
        await until(self._accepts, f"{self.kind} server accepts connections", within)

    def spawn(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        if self.log is None:
            self.process = subprocess.Popen(
                self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            return
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(self.command(), stdout=output, stderr=subprocess.STDOUT)

    async def _accepts(self) -> bool:
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        return True

    async def stop(self) -> None:
        """SIGKILL (a crash, as the tests and the cluster's faults want) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            await asyncio.to_thread(self.process.wait, 30)
        self.process = None

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, kind: str) -> AsyncIterator[PrivateServer]:
        """A server of `kind` for the block: started, then killed and its store removed."""
        server = cls(kind)
        await server.start()
        try:
            yield server
        finally:
            await server.stop()
            shutil.rmtree(server.store, ignore_errors=True)
