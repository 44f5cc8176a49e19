"""The durable queue: claim with SKIP LOCKED and leases, retry with backoff, give up, lease
expiry, graceful stop, cleanup, and a worker killed with SIGKILL in the middle of a batch."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tenantd.app.bundle import Domains, open_services
from tenantd.app.settings import load_settings
from tenantd.jobs import JobInfo, JobKind, PermanentJobError
from tenantd.jobs import runner as runner_module
from tenantd.jobs.queue import retry_delay
from tenantd.jobs.runner import JobRunner
from tenantd.jobs.settings import JobSettings
from tenantd.jobs.sweeps import cleanup_finished_jobs
from tenantd.notifications import send
from tenantd.notifications.sweeps import cleanup_dedup
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    def __init__(self) -> None:
        self.calls: collections.Counter[int] = collections.Counter()
        self.times: dict[int, list[float]] = collections.defaultdict(list)
        self.given_up: list[tuple[int, str]] = []


def kind(
    name: str,
    recorder: Recorder,
    *,
    fail_until: int = 0,
    permanent: bool = False,
    sleep: float = 0.0,
    max_attempts: int = 5,
) -> JobKind:
    async def run(services: Domains, payload: dict[str, Any], info: JobInfo) -> None:
        n = payload["n"]
        recorder.calls[n] += 1
        recorder.times[n].append(time.monotonic())
        if sleep:
            await asyncio.sleep(sleep)
        if permanent:
            raise PermanentJobError("cannot ever work")
        if info.attempts <= fail_until:
            raise RuntimeError(f"attempt {info.attempts} fails")

    async def give_up(services: Domains, payload: dict[str, Any], error: str) -> None:
        recorder.given_up.append((payload["n"], error))

    return JobKind(name=name, run=run, on_give_up=give_up, max_attempts=max_attempts)


async def job_rows(services: Domains, kind_name: str) -> list[dict[str, Any]]:
    return await services.db.fetch_all(
        "SELECT * FROM jobs WHERE kind = %(k)s ORDER BY id", {"k": kind_name}
    )


async def all_finished(services: Domains, kind_name: str) -> bool:
    rows = await job_rows(services, kind_name)
    return bool(rows) and all(r["status"] in ("done", "failed") for r in rows)


async def test_a_job_runs_once_and_is_marked_done(services: Domains) -> None:
    recorder = Recorder()
    services.jobs.register(kind("test.ok", recorder))
    [job_id] = await services.jobs.enqueue(services.db, "test.ok", {"n": 1})
    await eventually(lambda: all_finished(services, "test.ok"))
    [row] = await job_rows(services, "test.ok")
    assert row["id"] == job_id
    assert (row["status"], row["attempts"], row["locked_until"]) == ("done", 1, None)
    assert row["finished_at"] is not None
    assert recorder.calls == {1: 1}


async def test_failures_retry_with_growing_backoff(settings: Any, migrated: str, db: Any) -> None:
    """Each failure puts the job back with run_at = now() + base * 2^(attempt - 1) +-20%,
    read from the row itself (exact, whatever the machine's speed); the test then moves
    run_at to now instead of waiting it out."""
    recorder = Recorder()
    base = 60.0
    async with open_services(settings.switched("QUEUES_ENABLED", True), migrated) as services:
        services.jobs.register(kind("test.flaky", recorder, fail_until=3))
        runner = JobRunner(
            services, config=services.jobs.config.model_copy(update={"retry_base_seconds": base})
        )
        [job_id] = await services.jobs.enqueue(services.db, "test.flaky", {"n": 1})
        await runner.start()
        try:
            for attempt in (1, 2, 3):
                row = await eventually(lambda n=attempt: _queued_after(services, job_id, n))
                delay = (row["run_at"] - row["updated_at"]).total_seconds()
                planned = base * 2 ** (attempt - 1)
                assert 0.8 * planned <= delay <= 1.2 * planned, (attempt, delay)
                assert recorder.calls == {1: attempt}  # not run again before it is due
                await services.db.execute(
                    "UPDATE jobs SET run_at = now() WHERE id = %(id)s", {"id": job_id}
                )
            await eventually(lambda: all_finished(services, "test.flaky"))
        finally:
            await runner.stop()
        [row] = await job_rows(services, "test.flaky")
    assert (row["status"], row["attempts"], row["last_error"]) == ("done", 4, None)
    assert recorder.calls == {1: 4}


async def _queued_after(services: Domains, job_id: int, attempts: int) -> dict[str, Any] | None:
    row = await services.db.fetch_one(
        "SELECT run_at, updated_at FROM jobs"
        " WHERE id = %(id)s AND status = 'queued' AND attempts = %(a)s",
        {"id": job_id, "a": attempts},
    )
    return dict(row) if row is not None else None


def test_retry_delay_is_exponential_and_capped(settings: Any) -> None:
    config = JobSettings().model_copy(update={"retry_base_seconds": 2.0, "retry_max_seconds": 60.0})
    assert 1.6 <= retry_delay(config, 1) <= 2.4
    assert 6.4 <= retry_delay(config, 3) <= 9.6
    assert retry_delay(config, 30) <= 72.0


async def test_exhausted_attempts_fail_and_give_up_once(services: Domains) -> None:
    recorder = Recorder()
    services.jobs.register(kind("test.broken", recorder, fail_until=99, max_attempts=3))
    await services.jobs.enqueue(services.db, "test.broken", {"n": 7})
    await eventually(lambda: all_finished(services, "test.broken"))
    [row] = await job_rows(services, "test.broken")
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert "attempt 3 fails" in row["last_error"]
    assert recorder.calls == {7: 3}
    await eventually(lambda: asyncio.sleep(0, recorder.given_up))  # runs after the row settles
    assert len(recorder.given_up) == 1 and recorder.given_up[0][0] == 7


async def test_permanent_errors_fail_at_once(services: Domains) -> None:
    recorder = Recorder()
    services.jobs.register(kind("test.permanent", recorder, permanent=True))
    await services.jobs.enqueue(services.db, "test.permanent", {"n": 1})
    await eventually(lambda: all_finished(services, "test.permanent"))
    [row] = await job_rows(services, "test.permanent")
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert recorder.calls == {1: 1}


async def test_an_expired_lease_is_claimed_again(services: Domains) -> None:
    recorder = Recorder()
    services.jobs.register(kind("test.orphan", recorder))
    await services.db.execute(
        "INSERT INTO jobs (kind, payload, status, attempts, locked_until, locked_by)"
        " VALUES ('test.orphan', '{\"n\": 1}', 'running', 1, now() - interval '1s', 'dead'),"
        "        ('test.orphan', '{\"n\": 2}', 'running', 1, now() + interval '1h', 'alive')"
    )
    await eventually(lambda: _done_count(services, "test.orphan", 1))
    await asyncio.sleep(0.3)
    assert recorder.calls == {1: 1}  # the live lease is left alone
    rows = await job_rows(services, "test.orphan")
    assert [(r["status"], r["attempts"]) for r in rows] == [("done", 2), ("running", 1)]


async def _done_count(services: Domains, kind_name: str, expected: int) -> bool:
    rows = await job_rows(services, kind_name)
    return sum(r["status"] == "done" for r in rows) == expected


@contextlib.asynccontextmanager
async def leased_runners(
    settings: Any, migrated: str, count: int
) -> AsyncIterator[tuple[Domains, list[JobRunner]]]:
    """`count` started runners on services of their own with 3 s leases: the heartbeat renews
    every lease/3, so the busy machine may stall for 2 s without a false takeover (1 s leases,
    the other tests', allow a third of a second)."""
    leased = settings.replaced(
        settings.jobs.model_copy(update={"queues_enabled": True, "lease_seconds": 3})
    )
    async with open_services(leased, migrated) as services:
        runners = [JobRunner(services) for _ in range(count)]
        for runner in runners:
            await runner.start()
        try:
            yield services, runners
        finally:
            for runner in runners:
                await runner.stop()


async def test_competing_runners_run_each_job_exactly_once(
    settings: Any, migrated: str, db: Any
) -> None:
    """Three runners, 300 jobs: claims never overlap (with leases long enough that a stall is
    not a takeover, which would be the lease doing its job, not a double claim)."""
    recorder = Recorder()
    async with leased_runners(settings, migrated, 3) as (services, runners):
        services.jobs.register(kind("test.many", recorder, sleep=0.002))
        async with services.db.transaction() as conn:
            for n in range(300):
                await services.jobs.enqueue(conn, "test.many", {"n": n})
        services.jobs.wake()
        await eventually(lambda: all_finished(services, "test.many"), within=60)
    assert len(recorder.calls) == 300
    assert set(recorder.calls.values()) == {1}
    assert sum(r.claimed > 0 for r in runners) > 1  # the work was shared


async def test_a_finished_job_keeps_its_lease_until_its_completion_is_written(
    settings: Any, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completions written 4.5 s after a job ends (as behind a busy pool), leases of 3 s: a
    peer looking for expired leases must not re-queue the job, and it must not run again."""
    monkeypatch.setattr(runner_module, "COMPLETE_FLUSH_SECONDS", 4.5)
    recorder = Recorder()
    async with leased_runners(settings, migrated, 2) as (services, _):
        services.jobs.register(kind("test.slow_record", recorder))
        await services.jobs.enqueue(services.db, "test.slow_record", {"n": 1})
        await eventually(lambda: all_finished(services, "test.slow_record"))
        [row] = await job_rows(services, "test.slow_record")
    assert recorder.calls == {1: 1}
    assert (row["status"], row["attempts"]) == ("done", 1)


async def test_heartbeat_keeps_a_long_job_leased(settings: Any, migrated: str, db: Any) -> None:
    """Lease 3 s, job 4.5 s: another runner must not take it over."""
    recorder = Recorder()
    async with leased_runners(settings, migrated, 2) as (services, _):
        services.jobs.register(kind("test.long", recorder, sleep=4.5))
        await services.jobs.enqueue(services.db, "test.long", {"n": 1})
        await eventually(lambda: all_finished(services, "test.long"))
    assert recorder.calls == {1: 1}


async def test_graceful_stop_finishes_short_jobs_and_releases_long_ones(
    settings: Any, migrated: str, db: Any
) -> None:
    """No app runner here: one runner, a short and a long job, stop within the bound."""
    recorder = Recorder()
    quiet = settings.switched("QUEUES_ENABLED", True)
    async with open_services(quiet, migrated) as services:
        services.jobs.register(kind("test.long", recorder, sleep=120))
        services.jobs.register(kind("test.short", recorder, sleep=0.1))
        runner = JobRunner(
            services, config=services.jobs.config.model_copy(update={"stop_timeout_seconds": 0.5})
        )
        await services.jobs.enqueue(services.db, "test.long", {"n": 1})
        await services.jobs.enqueue(services.db, "test.short", {"n": 2})
        await runner.start()
        await eventually(lambda: _running_count(services, 2))
        started = time.monotonic()
        await runner.stop()
        # The 0.5 s stop timeout, not the long job's 120 s (generous: the machine may be busy).
        assert time.monotonic() - started < 30
        [short] = await job_rows(services, "test.short")
        [long_] = await job_rows(services, "test.long")
        assert short["status"] == "done"
        # Released: queued again, the interrupted attempt not counted, no lease.
        assert (long_["status"], long_["attempts"], long_["locked_by"], long_["locked_until"]) == (
            "queued",
            0,
            None,
            None,
        )
        assert recorder.calls == {1: 1, 2: 1}


async def _running_count(services: Domains, n: int) -> bool:
    count = await services.db.fetch_val("SELECT count(*) FROM jobs WHERE status = 'running'")
    return bool(count == n)


async def test_enqueue_joins_the_callers_transaction(services: Domains) -> None:
    recorder = Recorder()
    services.jobs.register(kind("test.tx", recorder))
    with pytest.raises(RuntimeError):
        async with services.db.transaction() as conn:
            await services.jobs.enqueue(conn, "test.tx", {"n": 1})
            raise RuntimeError("rolled back")
    async with services.db.transaction() as conn:
        await services.jobs.enqueue(conn, "test.tx", {"n": 2})
    await eventually(lambda: all_finished(services, "test.tx"))
    assert recorder.calls == {2: 1}


async def test_cleanup_functions(services: Domains) -> None:
    await services.db.execute(
        "INSERT INTO jobs (kind, payload, status, finished_at) VALUES"
        " ('old.done', '{}', 'done', now() - interval '8 days'),"
        " ('old.failed', '{}', 'failed', now() - interval '8 days'),"
        " ('new.done', '{}', 'done', now()),"
        " ('old.queued', '{}', 'queued', NULL)"
    )
    assert await cleanup_finished_jobs(services.db, dry_run=True) == 2
    assert await cleanup_finished_jobs(services.db, batch_size=1) == 2
    kinds = {r["kind"] for r in await services.db.fetch_all("SELECT kind FROM jobs")}
    assert kinds == {"new.done", "old.queued"}
    await services.db.execute(
        "INSERT INTO notification_dedup (dedup_key, expires_at) VALUES"
        " ('a', now() - interval '1 minute'), ('b', now() - interval '1 hour'),"
        " ('c', now() + interval '1 minute')"
    )
    assert await cleanup_dedup(services.db, dry_run=True) == 2
    assert await cleanup_dedup(services.db, batch_size=1) == 2
    assert await services.db.fetch_val("SELECT dedup_key FROM notification_dedup") == "c"
    assert await cleanup_dedup(services.db) == 0


@pytest.mark.slow
async def test_a_worker_killed_mid_batch_loses_nothing_and_doubles_nothing(
    env: dict[str, str], migrated: str, db: Any, factory: Any
) -> None:
    total = 400
    worker_env = {
        **os.environ,
        **env,
        "NOTIFICATIONS_SSE_ENABLED": "false",
        "TENANTD_JOB_CONCURRENCY": "8",
        "TENANTD_JOB_BATCH_SIZE": "8",
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "error",
    }
    settings = load_settings(environ=worker_env)
    user = await factory.user()
    async with open_services(settings, migrated) as services:
        async with services.db.transaction() as conn:
            for n in range(total):
                await send(
                    services.notifications,
                    "ping.simple",
                    recipient_user_id=user.id,
                    payload={"n": n},
                    conn=conn,
                )

        async def count() -> int:
            value: int = await services.db.fetch_val("SELECT count(*) FROM notifications")
            return value

        first = await start_worker(worker_env)
        try:
            await eventually(lambda: _at_least(count, total // 4), within=30, interval=0.005)
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        at_kill = await count()
        running = await services.db.fetch_val("SELECT count(*) FROM jobs WHERE status = 'running'")
        assert 0 < at_kill < total, "kill the worker mid-run"
        assert running > 0, "jobs were in flight when the worker died"

        second = await start_worker(worker_env)
        try:
            await eventually(lambda: _no_open_jobs(services), within=60, interval=0.05)
        finally:
            second.terminate()
            await second.wait()

        assert await count() == total
        distinct = await services.db.fetch_val(
            "SELECT count(DISTINCT payload->>'n') FROM notifications"
        )
        assert distinct == total
        assert (
            await services.db.fetch_val("SELECT count(*) FROM notification_deliveries") == total
        )  # ping.simple with SSE off: in_app only, once each
        rerun = await services.db.fetch_val(
            "SELECT count(*) FROM jobs WHERE kind = 'notifications.dispatch' AND attempts > 1"
        )
        assert rerun > 0  # the dead worker's leases ran out and were claimed again


async def start_worker(env: dict[str, str]) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.jobs.worker_script",
        cwd=str(ROOT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line.strip() == b"ready"
    return process


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)


async def _no_open_jobs(services: Domains) -> bool:
    open_jobs = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
    )
    return bool(open_jobs == 0)


async def test_a_dispatch_batch_isolates_bad_jobs(services: Domains, factory: Any) -> None:
    """Refused jobs fail alone; a statement error reruns the batch one job at a time."""
    from tenantd.notifications.jobs import run_dispatch_batch

    user = await factory.user()

    def job(n: int, **overrides: Any) -> tuple[JobInfo, dict[str, Any]]:
        payload = {
            "notificationId": str(uuid.uuid4()),
            "eventType": "ping.simple",
            "recipientUserId": str(user.id),
            "accountId": None,
            "payload": {"n": n},
            **overrides,
        }
        return JobInfo(id=n, kind="notifications.dispatch", attempts=1, max_attempts=8), payload

    refused = [
        job(1),
        job(2, recipientUserId=str(uuid.uuid4())),  # recipient gone
        job(3, payload={"n": "not a number"}),  # no longer valid
        job(4),
    ]
    results = await run_dispatch_batch(services.notifications, refused)
    assert results[0] is None and results[3] is None
    assert isinstance(results[1], PermanentJobError) and isinstance(results[2], PermanentJobError)
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 2
    broken = [job(5), job(6, accountId=str(uuid.uuid4())), job(7)]  # unknown account: FK error
    results = await run_dispatch_batch(services.notifications, broken)
    assert results[0] is None and results[2] is None and results[1] is not None
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 4


async def test_a_dispatch_batch_writes_its_notifications_in_one_statement(
    services: Domains, factory: Any, monkeypatch: Any
) -> None:
    """16 dispatches: one DISPATCH_BATCH_SQL; a dedup key twice in one batch delivers once,
    follow-up jobs (email) are queued in the same transaction, every row as a lone send."""
    from tenantd.notifications import dispatch_batch
    from tenantd.notifications.jobs import run_dispatch_batch

    user = await factory.user()
    batches: list[int] = []
    original = dispatch_batch.queries.persist_dispatches

    async def counted(conn: Any, parameters: Any) -> Any:
        batches.append(len(parameters))
        return await original(conn, parameters)

    monkeypatch.setattr(dispatch_batch.queries, "persist_dispatches", counted)

    def job(n: int, event: str, payload: dict[str, Any]) -> tuple[JobInfo, dict[str, Any]]:
        body = {
            "notificationId": str(uuid.uuid4()),
            "eventType": event,
            "recipientUserId": str(user.id),
            "accountId": None,
            "payload": payload,
        }
        return JobInfo(id=n, kind="notifications.dispatch", attempts=1, max_attempts=8), body

    comment = {"actorId": str(uuid.uuid4()), "commentId": "same", "text": "Hi"}
    items = [job(n, "ping.simple", {"n": n}) for n in range(14)]
    items += [job(14, "comment.created", comment), job(15, "comment.created", comment)]
    results = await run_dispatch_batch(services.notifications, items)
    assert results == [None] * 16
    assert batches == [16]
    titles = await services.db.fetch_all(
        "SELECT title FROM notifications WHERE event_type = 'ping.simple'"
    )
    assert sorted(row["title"] for row in titles) == sorted(f"Ping {n}" for n in range(14))
    comments = await services.db.fetch_all(
        "SELECT id FROM notifications WHERE event_type = 'comment.created'"
    )
    assert len(comments) == 1  # the second of the batch was a duplicate
    assert comments[0]["id"] == uuid.UUID(items[14][1]["notificationId"])  # the first wins
    deliveries = await services.db.fetch_all(
        "SELECT channel, status FROM notification_deliveries WHERE notification_id = %(id)s",
        {"id": comments[0]["id"]},
    )
    assert {row["channel"] for row in deliveries} == {"in_app", "email"}  # sse is off here
    emails = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE kind = 'notifications.email'"
        " AND payload->>'notificationId' = %(id)s",
        {"id": str(comments[0]["id"])},
    )
    assert emails == 1
    # Run again (a job re-run after a crash): nothing new, every one idempotent.
    assert await run_dispatch_batch(services.notifications, items) == [None] * 16
    assert await services.db.fetch_val("SELECT count(*) FROM notifications") == 15
