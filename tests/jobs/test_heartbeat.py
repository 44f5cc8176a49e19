"""A running job keeps its lease while the pool is exhausted: the heartbeat has its own
connection, so another runner never re-queues (steals) a live job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from tenantd.app import AppServices
from tenantd.db import Database
from tenantd.identity.bundle import SERVICES
from tenantd.jobs import JobInfo, JobKind
from tenantd.jobs import queries as jobs
from tests.helpers import eventually


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["JOB_LEASE_SECONDS"] = "3"  # a beat every second
    env["DB_POOL_MAX"] = "3"
    return env


async def test_a_starved_pool_does_not_cost_a_running_job_its_lease(
    services: AppServices, app: web.Application, db: Database
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def hold(services: AppServices, payload: dict[str, Any], info: JobInfo) -> None:
        started.set()
        await release.wait()

    services.jobs.register(JobKind(name="test.hold", run=hold, timeout=120))
    [job_id] = await services.jobs.enqueue(db, "test.hold", {})
    await eventually(lambda: asyncio.sleep(0, started.is_set()))
    first = await db.fetch_one(
        "SELECT locked_until, locked_by FROM jobs WHERE id = %(id)s", {"id": job_id}
    )
    assert first is not None

    pool = app[SERVICES].db.pool
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
