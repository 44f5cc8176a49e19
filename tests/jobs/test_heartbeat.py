"""A running job keeps its lease while the pool is exhausted: the heartbeat has its own
connection, so another runner never re-queues (steals) a live job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from tenantd.app.bundle import Domains
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.jobs import JobInfo, JobKind
from tenantd.jobs import queries as jobs
from tests.helpers import eventually


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["JOB_LEASE_SECONDS"] = "6"  # a beat every two seconds
    env["DB_POOL_MAX"] = "3"
    return env


async def running_job(services: Domains, db: Database) -> tuple[Any, asyncio.Event, dict[str, Any]]:
    """A job that runs until `release` is set, once it runs: its id, the event, its lease."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def hold(services: Domains, payload: dict[str, Any], info: JobInfo) -> None:
        started.set()
        await release.wait()

    services.jobs.register(JobKind(name="test.hold", run=hold, timeout=120))
    [job_id] = await services.jobs.enqueue(db, "test.hold", {})
    await eventually(lambda: asyncio.sleep(0, started.is_set()))
    lease = await db.fetch_one(
        "SELECT locked_until, locked_by FROM jobs WHERE id = %(id)s", {"id": job_id}
    )
    assert lease is not None
    return job_id, release, lease


async def test_a_starved_pool_does_not_cost_a_running_job_its_lease(
    services: Domains, app: web.Application, db: Database
) -> None:
    job_id, release, first = await running_job(services, db)

    pool = app[DOMAINS].db.pool
    held = [await pool.acquire() for _ in range(int(pool.maxsize or 0))]
    try:
        assert pool.freesize == 0
        # Past the end of the lease the job had when the pool ran dry ...
        await eventually(
            lambda: db.fetch_val("SELECT now() > %(t)s", {"t": first["locked_until"]}),
            within=30,
        )
        # ... another runner looks for expired leases, and finds none: the lease moved.
        async with db.connection() as conn:
            assert await jobs.requeue_expired(conn) == 0
        row = await db.fetch_one(
            "SELECT status, locked_by, locked_until > now() AS live,"
            " locked_until > %(t)s AS moved FROM jobs WHERE id = %(id)s",
            {"id": job_id, "t": first["locked_until"]},
        )
        assert row == {
            "status": "running",
            "locked_by": first["locked_by"],
            "live": True,
            "moved": True,
        }
    finally:
        for raw in held:
            await pool.release(raw)
    release.set()

    async def done() -> bool:
        status = await db.fetch_val("SELECT status FROM jobs WHERE id = %(id)s", {"id": job_id})
        return bool(status == "done")

    await eventually(done, within=30)


async def test_a_slow_beat_does_not_end_the_workers_session(
    services: Domains, app: web.Application, db: Database
) -> None:
    """A beat that takes longer than the beat interval (a loaded machine) keeps the worker's
    registered session: peers take its end for the process's death and re-queue its jobs."""
    job_id, release, job = await running_job(services, db)
    session = "SELECT backend_pid, backend_start FROM job_workers WHERE worker = %(w)s"
    registered = await db.fetch_one(session, {"w": job["locked_by"]})
    assert registered is not None
    # The next beat waits behind this row lock for longer than the beat interval (2 s), well
    # within the lease (6 s) that bounds it.
    async with db.transaction() as conn:
        await conn.execute("SELECT 1 FROM jobs WHERE id = %(id)s FOR UPDATE", {"id": job_id})
        await eventually(
            lambda: db.fetch_val(
                "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = %(pid)s"
                " AND wait_event_type = 'Lock'",
                {"pid": registered["backend_pid"]},
            ),
            within=30,
        )
        await asyncio.sleep(2.5)
    # The beat lands once the lock is gone, on the same session.
    await eventually(
        lambda: db.fetch_val(
            "SELECT locked_until > %(t)s FROM jobs WHERE id = %(id)s",
            {"id": job_id, "t": job["locked_until"]},
        ),
        within=30,
    )
    assert await db.fetch_one(session, {"w": job["locked_by"]}) == registered
    async with db.connection() as conn:
        assert await jobs.requeue_expired(conn) == 0
    assert await db.fetch_val("SELECT status FROM jobs WHERE id = %(id)s", {"id": job_id}) == (
        "running"
    )
    release.set()
