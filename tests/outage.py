"""A PostgreSQL cluster of a test's own, for the fault tests: stopped, started, restarted or
paused (SIGSTOP of the postmaster and every backend) from the test, without disturbing the
session's shared cluster. Created once per test module (initdb and the migrations take a few
seconds); every fault is undone before the test ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.private_servers import migrate_url
from tenantd.db.embedded import EmbeddedCluster, find_pg_bin


class FaultyCluster:
    """The cluster and the faults a test drives on it."""

    def __init__(self, root: Path):
        self.cluster = EmbeddedCluster(root / "pg")

    @property
    def url(self) -> str:
        return self.cluster.url

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: every connection ends, new ones are refused."""
        self.cluster.stop()

    def restart(self) -> None:
        """`pg_ctl restart -m fast`."""
        result = self.cluster._run(
            [
                str(find_pg_bin() / "pg_ctl"),
                "restart",
                "-m",
                "fast",
                "-w",
                "-D",
                str(self.cluster.data),
                "-l",
                str(self.cluster.root / "postgres.log"),
            ],
            check=False,
        )
        assert result.returncode == 0, result.stderr

    def _processes(self) -> list[int]:
        """The postmaster and its children (backends, background workers)."""
        postmaster = int((self.cluster.data / "postmaster.pid").read_text().split()[0])
        pids = [postmaster]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry))
        return pids

    def pause(self) -> list[int]:
        """SIGSTOP the postmaster and every backend: connections stay open, nothing answers."""
        pids = self._processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def resume(self, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        pids = self.pause()
        try:
            yield
        finally:
            self.resume(pids)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        self.stop()
        try:
            yield
        finally:
            self.start()


@pytest.fixture(scope="module")
def faulty_cluster() -> Iterator[FaultyCluster]:
    """A migrated cluster of this module's own (DATABASE_URL or not: it restarts it)."""
    root = Path(tempfile.mkdtemp(prefix="tenantd-faults-"))
    cluster = FaultyCluster(root)
    cluster.start()
    try:
        asyncio.run(migrate_url(cluster.url))
        yield cluster
    finally:
        cluster.stop()
