"""The in-process worker pool: claim leased batches, run them on aiojobs, settle them.

- Claims use `FOR UPDATE SKIP LOCKED` and lease each job for JOB_LEASE_SECONDS; a heartbeat
  extends the leases of running jobs, so only a dead process lets its lease run out. Every
  runner looks for such jobs every tenth of a lease (at most 5 s, at least a poll interval),
  and once at its start, and queues them again, and then any instance claims them.
- A runner keeps one connection of its own open while it lives (its presence, outside the
  pool, which busy requests or jobs may exhaust) and registers that session in job_workers.
  When the process dies (kill -9, a crash, the host gone) the server ends the session, and the
  next look of any runner, a restarted instance's first one included, queues its jobs again
  without waiting out the lease (jobs/queries.py, REQUEUE_EXPIRED_SQL). The heartbeat beats
  on that connection every third of a lease, each beat bounded by the lease: a live process
  never loses a lease by waiting for a pool connection, and a slow beat never ends the
  session (which would tell the peers the process died).
- Completions are written in batches (one UPDATE for many jobs). A finished job keeps its
  lease until its completion is written: a slow write (a busy pool) must not let a peer run
  it again. A crash between a job's own commit and its completion runs the job again, which
  is why job functions are idempotent (notification jobs key on the notification id).
- Failures retry with exponential backoff up to max_attempts, then call the kind's give-up
  hook.
- `stop` stops claiming, gives running jobs `stop_timeout` seconds, cancels the rest and
  hands their leases back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiojobs
import aiopg

from tenantd.db import Conn
from tenantd.jobs import queries
from tenantd.jobs.kinds import BoundKind, JobInfo, PermanentJobError
from tenantd.jobs.queue import JobHost, attempt, describe, give_up, retry_delay
from tenantd.jobs.settings import JobSettings

log = logging.getLogger(__name__)

COMPLETE_FLUSH_SECONDS = 0.02
PRESENCE_RETRY_SECONDS = (0.1, 5.0)  # reconnect backoff of the presence connection
REGISTER_WAIT_SECONDS = 5.0  # start() waits this long for the first registration
DEAD_CHECK_SECONDS = 5.0  # the longest time between two looks for dead workers' jobs


class JobRunner:
    def __init__(self, host: JobHost, *, config: JobSettings | None = None):
        self.host = host  # the runner's database and settings; jobs are bound without it
        self.queue = host.jobs
        self.config = config or host.jobs.config
        self.lease_seconds = self.config.lease_seconds
        self._dsn: str = host.db.pool._dsn  # the pool's own DSN (psycopg2 masks passwords)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._running: set[int] = set()
        self._cancelled: set[int] = set()
        self._done: list[int] = []  # finished, waiting for the next completion write
        self._unrecorded: set[int] = set()  # finished, completion not yet written: still leased
        self._done_event = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._stopping = False
        self._scheduler: aiojobs.Scheduler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._presence: Conn | None = None  # registered in job_workers while it is open
        self._registered = asyncio.Event()
        self._presence_task: asyncio.Task[None] | None = None
        self.claimed = 0
        # Expired leases are looked for a tenth of a lease apart (at least a poll apart): a
        # dead process's jobs run again at most 10% later, and an idle runner makes one
        # statement per poll instead of two (each costs the busy server a context switch).
        # Dead workers (their session gone) are looked for at least every DEAD_CHECK_SECONDS
        # whatever the lease: their jobs need not wait for it.
        self.requeue_seconds = max(
            self.config.poll_seconds, min(self.lease_seconds / 10, DEAD_CHECK_SECONDS)
        )

    @property
    def kinds(self) -> dict[str, BoundKind]:
        """What this runner claims: every kind, or only the durable ones with queues off."""
        if self.host.settings.section(JobSettings).queues_enabled:
            return self.queue.kinds
        return {name: kind for name, kind in self.queue.kinds.items() if kind.durable}

    async def start(self) -> None:
        self._scheduler = aiojobs.Scheduler(limit=None, pending_limit=0)
        loop = asyncio.get_running_loop()
        self._presence_task = loop.create_task(self._presence_loop())
        # Registered before the first claim, so every job it runs is known to be its own.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REGISTER_WAIT_SECONDS):
                await self._registered.wait()
        self._tasks = [
            loop.create_task(self._claim_loop()),
            loop.create_task(self._heartbeat_loop()),
            loop.create_task(self._complete_loop()),
        ]
        log.info("job runner started", extra={"worker": self.worker_id})

    async def stop(self) -> None:
        """Finish or hand back running jobs within stop_timeout, then stop."""
        self._stopping = True
        self.queue.wake()
        self._slot_free.set()
        claim_task, heartbeat_task, complete_task = self._tasks
        with contextlib.suppress(asyncio.CancelledError):
            await claim_task
        if self._scheduler is not None:
            await self._scheduler.wait_and_close(timeout=self.config.stop_timeout_seconds)
        heartbeat_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat_task
        complete_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await complete_task
        await self._flush_done()
        leftover = sorted(self._cancelled | self._running)
        if leftover:
            async with self.host.db.connection() as conn:
                released = await queries.release_jobs(conn, ids=leftover, worker=self.worker_id)
            log.warning("released %d unfinished job(s) at shutdown", released)
        await self._leave()
        log.info("job runner stopped", extra={"worker": self.worker_id})

    async def _leave(self) -> None:
        """Close the presence connection and forget this worker (nothing of it runs now)."""
        if self._presence_task is not None:
            self._presence_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._presence_task
        try:
            async with self.host.db.connection() as conn:
                await queries.unregister_worker(conn, worker=self.worker_id)
        except Exception as error:  # the row of a worker with no job running harms nothing
            log.warning("could not unregister job worker: %r", error)

    # --- claiming -----------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        wakeup = self.queue.wakeup_event()
        loop = asyncio.get_running_loop()
        next_requeue = 0.0
        while not self._stopping:
            if loop.time() >= next_requeue:
                next_requeue = loop.time() + self.requeue_seconds
                await self._requeue_expired()
            free = self.config.concurrency - len(self._running)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            wanted = min(free, self.config.batch_size)
            wakeup.clear()
            try:
                async with self.host.db.connection() as conn:
                    rows = await queries.claim_jobs(
                        conn,
                        kinds=list(self.kinds),
                        worker=self.worker_id,
                        limit=wanted,
                        lease_seconds=self.lease_seconds,
                    )
            except Exception:
                log.exception("claiming jobs failed")
                rows = []
            assert self._scheduler is not None
            for group in self._groups(rows):
                for row in group:
                    self._running.add(row["id"])
                if len(group) == 1:
                    await self._scheduler.spawn(self._run(group[0]))
                else:
                    await self._scheduler.spawn(self._run_batch(group))
            self.claimed += len(rows)
            if len(rows) < wanted and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), self.config.poll_seconds)

    async def _requeue_expired(self) -> None:
        try:
            async with self.host.db.connection() as conn:
                requeued = await queries.requeue_expired(conn)
        except Exception:
            log.exception("re-queueing jobs with expired leases failed")
            return
        if requeued:
            log.warning("re-queued %d job(s) whose lease ran out", requeued)

    # --- running ------------------------------------------------------------------------

    def _groups(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """Jobs of a kind with run_batch go together (in chunks); the rest one by one."""
        groups: list[list[dict[str, Any]]] = []
        batches: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            kind = self.kinds[row["kind"]]
            if kind.run_batch is None or row["attempts"] > row["max_attempts"]:
                groups.append([row])
                continue
            batch = batches.setdefault(kind.name, [])
            batch.append(row)
            if len(batch) >= kind.batch_size:
                groups.append(batch)
                batches[kind.name] = []
        groups.extend(batch for batch in batches.values() if batch)
        return groups

    async def _run_batch(self, rows: list[dict[str, Any]]) -> None:
        kind = self.kinds[rows[0]["kind"]]
        assert kind.run_batch is not None
        items = [
            (
                JobInfo(
                    id=row["id"],
                    kind=kind.name,
                    attempts=row["attempts"],
                    max_attempts=row["max_attempts"],
                ),
                row["payload"] or {},
            )
            for row in rows
        ]
        try:
            try:
                async with asyncio.timeout(kind.timeout):
                    results = await kind.run_batch(items)
            except asyncio.CancelledError:
                self._cancelled.update(row["id"] for row in rows)
                raise
            except Exception as error:
                results = [error] * len(items)
            for (info, payload), result in zip(items, results, strict=True):
                assert info.id is not None
                if result is None:
                    self._finished(info.id)
                else:
                    final = isinstance(result, PermanentJobError) or info.final_attempt
                    await self._fail(kind, info, payload, describe(result), final=final)
            self._done_event.set()
        finally:
            for row in rows:
                self._running.discard(row["id"])
            self._slot_free.set()

    async def _run(self, row: dict[str, Any]) -> None:
        job_id: int = row["id"]
        kind = self.kinds[row["kind"]]
        payload = row["payload"] or {}
        info = JobInfo(
            id=job_id, kind=kind.name, attempts=row["attempts"], max_attempts=row["max_attempts"]
        )
        try:
            if info.attempts > info.max_attempts:
                # Its lease ran out once too often (its processes kept dying).
                await self._fail(kind, info, payload, "attempts exhausted", final=True)
                return
            try:
                failure = await attempt(kind, payload, info)
            except asyncio.CancelledError:
                self._cancelled.add(job_id)
                raise
            if failure is not None:
                error, final = failure
                await self._fail(kind, info, payload, error, final=final)
                return
            self._finished(job_id)
            self._done_event.set()
        finally:
            self._running.discard(job_id)
            self._slot_free.set()

    def _finished(self, job_id: int) -> None:
        self._unrecorded.add(job_id)
        self._done.append(job_id)

    async def _fail(
        self, kind: BoundKind, info: JobInfo, payload: dict[str, Any], error: str, *, final: bool
    ) -> None:
        assert info.id is not None
        delay = 0.0 if final else retry_delay(self.config, info.attempts)
        level = logging.ERROR if final else logging.WARNING
        log.log(
            level,
            "job %s #%s attempt %d/%d failed%s: %s",
            kind.name,
            info.id,
            info.attempts,
            info.max_attempts,
            " for good" if final else f"; retry in {delay:.1f}s",
            error,
        )
        try:
            async with self.host.db.connection() as conn:
                updated = await queries.retry_or_fail_job(
                    conn,
                    job_id=info.id,
                    worker=self.worker_id,
                    error=error,
                    final=final,
                    delay_seconds=delay,
                )
        except Exception:
            log.exception("recording the failure of job #%s failed", info.id)
            return
        if final and updated:
            await give_up(kind, payload, error)

    # --- completion and leases ----------------------------------------------------------

    async def _complete_loop(self) -> None:
        while True:
            await self._done_event.wait()
            await asyncio.sleep(COMPLETE_FLUSH_SECONDS)  # gather a batch
            self._done_event.clear()
            try:
                await self._flush_done()
            except Exception:
                log.exception("marking jobs done failed; they will run again (idempotent)")

    async def _flush_done(self) -> None:
        if not self._done:
            return
        ids, self._done = self._done, []
        try:
            async with self.host.db.connection() as conn:
                await queries.complete_jobs(conn, ids=ids, worker=self.worker_id)
        finally:
            self._unrecorded.difference_update(ids)

    async def _presence_loop(self) -> None:
        """Keep the presence connection open and registered; reconnect (and register the new
        session) whenever it ends."""
        delay, longest = PRESENCE_RETRY_SECONDS
        while True:
            conn: Conn | None = None
            try:
                raw = await aiopg.connect(self._dsn, enable_hstore=False)
                conn = Conn(raw)
                await queries.register_worker(conn, worker=self.worker_id)
                self._presence = conn
                self._registered.set()
                delay = PRESENCE_RETRY_SECONDS[0]
                while True:  # nothing is LISTENed: this returns only when the session ends
                    await raw.notifies.get()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("job runner presence connection lost; reconnecting: %r", error)
            finally:
                self._presence = None
                await _closed(conn)
            await asyncio.sleep(delay)
            delay = min(delay * 2, longest)

    async def _heartbeat_loop(self) -> None:
        interval = max(self.lease_seconds / 3, 0.2)
        # Beats go on while jobs run during a stop; the flag ends the loop even if aiopg
        # swallows the cancel (asyncio.wait_for on Python 3.11).
        while not self._stopping or self._running:
            await asyncio.sleep(interval)
            leased = self._running | self._unrecorded
            if not leased:
                continue
            conn = self._presence
            if conn is None:
                log.warning("extending job leases failed: no database connection")
                continue
            try:
                # Bounded by the lease, not the beat interval: aiopg closes a connection whose
                # statement is cancelled, and this one's end is how peers see a dead worker
                # (they re-queue its running jobs at once). A slow beat may still land in
                # time; one that took a whole lease lost the leases anyway.
                async with asyncio.timeout(self.lease_seconds):
                    await queries.extend_leases(
                        conn,
                        ids=list(leased),
                        worker=self.worker_id,
                        lease_seconds=self.lease_seconds,
                    )
            except Exception as error:
                log.warning("extending job leases failed: %r", error)
                conn.raw.close()  # the presence loop opens and registers a new one


async def _closed(conn: Conn | None) -> None:
    """Close a connection of our own (a new one is opened when next needed)."""
    if conn is not None and not conn.raw.closed:
        with contextlib.suppress(Exception):
            await conn.raw.close()


@contextlib.asynccontextmanager
async def running(host: JobHost) -> AsyncIterator[JobRunner]:
    """A started runner, stopped gracefully on exit."""
    runner = JobRunner(host)
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()
