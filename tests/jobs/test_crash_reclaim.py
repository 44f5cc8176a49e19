"""A job whose worker was killed (kill -9 of a real `tenantd serve` mid-job) runs again well
before its lease ends (issue 26, item 8): the dead worker's session left pg_stat_activity, so
a restarted instance (at its first look) and a live peer (at its next) queue the job again.
The lease is 300 s here: nothing but the new mechanism can explain a resume within seconds."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.jobs import queries as job_queries
from tests.helpers import SECRET, eventually
from tests.ops.servers import REPO, Server, server_env, start_server, wait_ready

pytestmark = pytest.mark.slow

LEASE = 300
SOON = 60.0  # seconds: "well before the lease ends", generous for a shared machine


def _starts(path: Path) -> list[tuple[int, int, int]]:
    """(process id, job id, attempt) of every start of the blocking job."""
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]  # type: ignore[misc]


async def _kill(server: Server) -> float:
    server.terminate(signal.SIGKILL)
    await asyncio.to_thread(server.wait, 10)
    return time.monotonic()


async def _row(db: Database, job_id: int) -> dict[str, Any]:
    row = await db.fetch_one(
        "SELECT status, locked_by, attempts, last_error,"
        " extract(epoch FROM locked_until - now()) AS lease_left FROM jobs WHERE id = %(id)s",
        {"id": job_id},
    )
    assert row is not None
    return row


async def test_a_killed_workers_job_resumes_without_waiting_out_its_lease(
    db: Database, migrated: str, tmp_path: Path
) -> None:
    starts = tmp_path / "starts.log"
    release = tmp_path / "release"
    env = server_env(
        migrated,
        tmp_path,
        SECRET,
        QUEUES_ENABLED="true",
        JOB_LEASE_SECONDS=str(LEASE),
        TENANTD_EVENT_MODULES="tests.jobs.blocking_jobs_fixture",
        TENANTD_TEST_JOB_LOG=str(starts),
        TENANTD_JOB_POLL_SECONDS="0.05",
        TENANTD_SCHEDULER_ENABLED="false",
        PYTHONPATH=str(REPO),
    )
    first = start_server("first", env, tmp_path)
    second = third = None
    try:
        await wait_ready(first)
        async with db.connection() as conn:  # the servers run it; this process has no queue
            job_id = await job_queries.insert_job(
                conn, kind="tests.block", payload={"release": str(release)}, max_attempts=5
            )
        await eventually(lambda: len(_starts(starts)) == 1)
        assert _starts(starts)[0] == (first.process.pid, job_id, 1)
        killed = await _kill(first)
        row = await _row(db, job_id)
        assert row["status"] == "running" and row["lease_left"] > LEASE - 60, row

        # A restarted instance resumes it at its first look.
        second = start_server("second", env, tmp_path)
        await wait_ready(second)
        await eventually(lambda: len(_starts(starts)) == 2, within=SOON)
        assert time.monotonic() - killed < SOON
        assert _starts(starts)[1] == (second.process.pid, job_id, 2)
        row = await _row(db, job_id)
        assert row["status"] == "running", row
        assert f":{second.process.pid}:" in row["locked_by"], row
        assert "is gone" in row["last_error"], row

        # A live peer resumes it at its next look when the instance running it dies.
        third = start_server("third", env, tmp_path)
        await wait_ready(third)
        killed = await _kill(second)
        await eventually(lambda: len(_starts(starts)) == 3, within=SOON)
        assert time.monotonic() - killed < SOON
        assert _starts(starts)[2] == (third.process.pid, job_id, 3)

        release.touch()

        async def done() -> bool:
            return (await _row(db, job_id))["status"] == "done"

        await eventually(done, within=30)
        assert len(_starts(starts)) == 3

        # The dead workers are forgotten; the live one stays registered.
        async def only_the_live_worker() -> bool:
            rows = await db.fetch_all("SELECT worker FROM job_workers")
            assert third is not None
            return [f":{third.process.pid}:" in row["worker"] for row in rows] == [True]

        await eventually(only_the_live_worker, within=30)
    finally:
        for server in (first, second, third):
            if server is not None and server.process.poll() is None:
                server.terminate()
                try:
                    await asyncio.to_thread(server.wait, 30)
                except subprocess.TimeoutExpired:
                    server.process.kill()
