"""Deferred work has one door: `JobQueue.enqueue` inside the caller's transaction takes effect
only once it commits. With QUEUES_ENABLED on the row is written in that transaction (nothing
on rollback, invisible before commit); off, the same job function runs in this process right
after the commit (nothing on rollback, nothing before it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.app.bundle import Domains, open_services
from tenantd.jobs import JobInfo, JobKind
from tests.helpers import eventually


class Calls:
    def __init__(self) -> None:
        self.seen: list[tuple[Any, dict[str, Any], JobInfo]] = []
        self.ran = asyncio.Event()

    def kind(self, name: str) -> JobKind:
        async def run(services: Any, payload: dict[str, Any], info: JobInfo) -> None:
            self.seen.append((services, payload, info))
            self.ran.set()

        return JobKind(name=name, run=run)


async def rows(services: Domains, kind: str) -> int:
    count: int = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE kind = %(k)s", {"k": kind}
    )
    return count


async def test_queues_on_a_rolled_back_transaction_enqueues_nothing(
    services: Domains,
) -> None:
    calls = Calls()
    services.jobs.register(calls.kind("test.rollback"))
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as conn:
            await services.jobs.enqueue(conn, "test.rollback", {"n": 1})
            raise RuntimeError("rolled back")
    assert await rows(services, "test.rollback") == 0
    # A later committed job runs, and the rolled-back one never does.
    async with services.db.transaction() as conn:
        await services.jobs.enqueue(conn, "test.rollback", {"n": 2})
    await asyncio.wait_for(calls.ran.wait(), 30)
    assert [payload for _, payload, _ in calls.seen] == [{"n": 2}]


async def test_queues_on_the_row_is_invisible_until_commit(services: Domains) -> None:
    calls = Calls()
    services.jobs.register(calls.kind("test.invisible"))
    async with services.db.transaction() as conn:
        [job_id] = await services.jobs.enqueue(conn, "test.invisible", {"n": 1})
        assert job_id is not None
        # Another connection (any runner's) cannot see, so cannot claim, the row yet.
        assert await rows(services, "test.invisible") == 0
        assert not calls.seen
    await asyncio.wait_for(calls.ran.wait(), 30)
    [(bound, payload, info)] = calls.seen
    assert (payload, info.id) == ({"n": 1}, job_id)
    assert bound is services  # bound to the services by the composition root


async def test_queues_off_the_same_job_runs_in_process_after_commit(
    settings: Any, migrated: str, db: Any
) -> None:
    calls = Calls()
    async with open_services(settings.switched("QUEUES_ENABLED", False), migrated) as services:
        services.jobs.register(calls.kind("test.inline"))
        async with services.db.transaction() as conn:
            assert await services.jobs.enqueue(conn, "test.inline", {"n": 1}) == [None]
            # Nothing runs, nor is started, before the transaction commits.
            assert services.jobs.pending_inline == 0
            assert not calls.seen
        await asyncio.wait_for(calls.ran.wait(), 30)
        [(bound, payload, info)] = calls.seen
        assert bound is services
        assert (payload, info.id, info.attempts) == ({"n": 1}, None, 1)
        assert await rows(services, "test.inline") == 0  # in this process: no row
        await services.jobs.drain(5)


async def test_queues_off_a_rolled_back_transaction_runs_nothing(
    settings: Any, migrated: str, db: Any
) -> None:
    calls = Calls()
    async with open_services(settings.switched("QUEUES_ENABLED", False), migrated) as services:
        services.jobs.register(calls.kind("test.inline_rollback"))
        with pytest.raises(RuntimeError):
            async with services.db.transaction() as conn:
                await services.jobs.enqueue(conn, "test.inline_rollback", {"n": 1})
                raise RuntimeError("rolled back")
        assert services.jobs.pending_inline == 0
        # Outside a transaction a job starts at once (each statement commits on its own).
        await services.jobs.enqueue(services.db, "test.inline_rollback", {"n": 2})
        await asyncio.wait_for(calls.ran.wait(), 30)
        await services.jobs.drain(5)
        assert [payload for _, payload, _ in calls.seen] == [{"n": 2}]


async def test_queues_off_a_failing_job_retries_as_the_runner_would(
    settings: Any, migrated: str, db: Any
) -> None:
    attempts: list[int] = []

    async def flaky(services: Any, payload: dict[str, Any], info: JobInfo) -> None:
        attempts.append(info.attempts)
        if info.attempts < 3:
            raise RuntimeError("not yet")

    fast = settings.switched("QUEUES_ENABLED", False)
    async with open_services(fast, migrated) as services:
        services.jobs.config = services.jobs.config.model_copy(update={"retry_base_seconds": 0.01})
        services.jobs.register(JobKind(name="test.inline_flaky", run=flaky, max_attempts=5))
        async with services.db.transaction() as conn:
            await services.jobs.enqueue(conn, "test.inline_flaky", {})
        await eventually(lambda: asyncio.sleep(0, attempts == [1, 2, 3]))
        await services.jobs.drain(5)
