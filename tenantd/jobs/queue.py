"""Deferred work has one door: `JobQueue.enqueue`, which takes effect after commit.

`enqueue(conn, kind, payload)` is called inside the caller's transaction (or with the
Database, outside one):
- QUEUES_ENABLED on (or a durable kind): the job rows are written on that connection, in that
  transaction, so they exist only if it commits; the runner of any instance claims them once
  committed (this process's runner is woken after the commit).
- off: nothing is written; once the transaction commits, the same job function runs in this
  process (a tracked task, the runner's retry policy, no durability); a rollback runs nothing.
  `drain` waits for those tasks at shutdown.
Either way a job runs by `attempt` (below), the runner's one step too.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from tenantd.db import Conn, Database
from tenantd.jobs import queries
from tenantd.jobs.coalesce import CoalescingWriter
from tenantd.jobs.kinds import BoundKind, JobInfo, JobKind, PermanentJobError
from tenantd.jobs.settings import JobSettings
from tenantd.settings import Settings

log = logging.getLogger(__name__)


def retry_delay(config: JobSettings, attempts: int) -> float:
    """Exponential backoff with +-20% jitter: base, 2*base, 4*base, ... capped."""
    delay = min(config.retry_base_seconds * (2 ** max(attempts - 1, 0)), config.retry_max_seconds)
    return delay * random.uniform(0.8, 1.2)


class JobHost(Protocol):
    """What the runner needs: the settings, the database and the queue (never handed to jobs)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def jobs(self) -> JobQueue: ...


Binder = Callable[[JobKind], BoundKind]


class JobQueue:
    """This process's kinds (bound by the composition root) and its one enqueue call."""

    def __init__(self, settings: Settings, kinds: Iterable[JobKind] = (), *, bind: Binder):
        self.settings = settings
        self.config = settings.section(JobSettings)  # the runner's knobs (TENANTD_JOB_*)
        self._bind = bind
        self.kinds: dict[str, BoundKind] = {}
        for kind in kinds:
            self.register(kind)
        self._wakeup: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writer: CoalescingWriter | None = None

    def register(self, kind: JobKind) -> None:
        """Add a kind to this process's table, bound as the composition root binds them
        (applications' own jobs, tests)."""
        self.kinds[kind.name] = self._bind(kind)

    def kind(self, name: str) -> BoundKind:
        try:
            return self.kinds[name]
        except KeyError:
            raise ValueError(f"unknown job kind {name!r}") from None

    def wakeup_event(self) -> asyncio.Event:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        return self._wakeup

    def wake(self) -> None:
        """Tell this process's runner that a job is ready (others find it by polling)."""
        if self._wakeup is not None:
            self._wakeup.set()

    @property
    def pending_inline(self) -> int:
        return len(self._tasks)

    async def enqueue(
        self,
        target: Conn | Database,
        kind: str,
        *payloads: dict[str, Any],
        delay_seconds: float | Sequence[float] = 0.0,
        for_user: uuid.UUID | None = None,
    ) -> list[int | None]:
        """Run `kind` once per payload after `target`'s transaction commits (at once when
        `target` is the Database or a connection outside a transaction), each due
        `delay_seconds` later (one for all, or one each). Per payload: its job id, or None
        (run in this process: queues off; or not written: `for_user` does not exist).

        `for_user` (one payload): the row is written only if that user exists, in the same
        statement; given the Database, it shares that statement with the overlapping calls
        of this process (group commit, jobs/coalesce.py)."""
        job = self.kind(kind)
        if not payloads:
            return []
        delays = (
            [float(delay_seconds)] * len(payloads)
            if isinstance(delay_seconds, int | float)
            else [float(delay) for delay in delay_seconds]
        )
        if len(delays) != len(payloads):
            raise ValueError("one delay per payload")
        if for_user is not None and (len(payloads) != 1 or delays[0]):
            raise ValueError("for_user takes one payload, due now")
        if not (self.settings.section(JobSettings).queues_enabled or job.durable):
            if for_user is not None:
                raise ValueError("for_user needs QUEUES_ENABLED (a durable row)")

            def start() -> None:
                for payload, delay in zip(payloads, delays, strict=True):
                    self._spawn(job, payload, delay)

            _after_commit(target, start)
            return [None] * len(payloads)
        ids = await self._write(target, job, list(payloads), delays, for_user)
        if any(job_id is not None for job_id in ids):
            _after_commit(target, self.wake)
        return ids

    async def _write(
        self,
        target: Conn | Database,
        job: BoundKind,
        payloads: list[dict[str, Any]],
        delays: list[float],
        for_user: uuid.UUID | None,
    ) -> list[int | None]:
        if for_user is not None and isinstance(target, Database):
            writer = self._writer
            if writer is None or writer.db is not target:
                writer = self._writer = CoalescingWriter(target, on_written=self.wake)
            job_id = await writer.write_for_user(
                kind=job.name, payload=payloads[0], max_attempts=job.max_attempts, user_id=for_user
            )
            return [job_id]
        if isinstance(target, Database):
            async with target.connection() as own:
                return await _insert(own, job, payloads, delays, for_user)
        return await _insert(target, job, payloads, delays, for_user)

    def _spawn(self, kind: BoundKind, payload: dict[str, Any], delay: float) -> None:
        task = asyncio.get_running_loop().create_task(self._run_inline(kind, payload, delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_inline(self, kind: BoundKind, payload: dict[str, Any], delay: float) -> None:
        """The job in this process (queues off): the runner's attempts and backoff."""
        if delay > 0:
            await asyncio.sleep(delay)
        attempts = 0
        while True:
            attempts += 1
            info = JobInfo(
                id=None, kind=kind.name, attempts=attempts, max_attempts=kind.max_attempts
            )
            failure = await attempt(kind, payload, info)
            if failure is None:
                return
            text, final = failure
            if final:
                log.warning("inline job %s failed for good: %s", kind.name, text)
                await give_up(kind, payload, text)
                return
            log.warning("inline job %s failed (attempt %d): %s", kind.name, attempts, text)
            await asyncio.sleep(retry_delay(self.config, attempts))

    async def drain(self, seconds: float) -> None:
        """Wait for in-process tasks (queues off); cancel what is left after `seconds`."""
        if not self._tasks:
            return
        pending = set(self._tasks)
        _, still = await asyncio.wait(pending, timeout=seconds)
        for task in still:
            task.cancel()
        if still:
            log.warning("cancelled %d inline job(s) at shutdown", len(still))
            await asyncio.wait(still, timeout=1.0)


def _after_commit(target: Conn | Database, callback: Callable[[], None]) -> None:
    if isinstance(target, Database):
        callback()  # written on a connection of its own: committed already
    else:
        target.after_commit(callback)


async def _insert(
    conn: Conn,
    job: BoundKind,
    payloads: list[dict[str, Any]],
    delays: list[float],
    for_user: uuid.UUID | None,
) -> list[int | None]:
    if for_user is not None:
        return [
            await queries.insert_job_for_user(
                conn,
                kind=job.name,
                payload=payloads[0],
                max_attempts=job.max_attempts,
                user_id=for_user,
            )
        ]
    if len(payloads) == 1:
        return [
            await queries.insert_job(
                conn,
                kind=job.name,
                payload=payloads[0],
                max_attempts=job.max_attempts,
                delay_seconds=delays[0],
            )
        ]
    return list(
        await queries.insert_jobs(
            conn, kind=job.name, payloads=payloads, max_attempts=job.max_attempts, delays=delays
        )
    )


async def attempt(
    kind: BoundKind, payload: dict[str, Any], info: JobInfo
) -> tuple[str, bool] | None:
    """One attempt of a job, by the runner or in this process: None when it succeeded,
    else (what went wrong, whether that was its last attempt)."""
    try:
        async with asyncio.timeout(kind.timeout):
            await kind.run(payload, info)
    except PermanentJobError as error:
        return describe(error), True
    except Exception as error:
        return describe(error), info.final_attempt
    return None


def describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:2000]


async def give_up(kind: BoundKind, payload: dict[str, Any], error: str) -> None:
    if kind.on_give_up is None:
        return
    try:
        await kind.on_give_up(payload, error)
    except Exception:
        log.exception("give-up hook of job %s failed", kind.name)
