"""The job switch of one process.

QUEUES_ENABLED on: `submit` writes a row to `jobs` (inside the caller's transaction when a
connection is passed) and the runner of any instance executes it. Off: the same job function
runs in this process as a tracked background task, with the same retry policy but no
durability; `drain` waits for those tasks at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tenantd.db import Conn, Database
from tenantd.jobs import queries
from tenantd.jobs.coalesce import CoalescingWriter
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.jobs.settings import JobSettings
from tenantd.settings import Settings

log = logging.getLogger(__name__)

# Advisory locks that let an inline task wait for its caller's transaction use the two-int
# form with this class id (distinct from the migration and sweep locks).
INLINE_LOCK_CLASS = 735_420
DEFAULT_MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class JobConfig:
    concurrency: int = 64  # jobs running at once per process
    batch_size: int = 64  # jobs claimed per round trip
    poll_seconds: float = 0.5  # idle wait between claims when nothing wakes the runner
    retry_base_seconds: float = 2.0  # first retry delay; doubles each attempt
    retry_max_seconds: float = 3600.0
    stop_timeout: float = 10.0  # graceful stop: running jobs get this long, then are released


def job_config(settings: Settings) -> JobConfig:
    """The runner's knobs of these settings (TENANTD_JOB_*)."""
    section = settings.section(JobSettings)
    return JobConfig(
        concurrency=section.concurrency,
        batch_size=section.batch_size,
        poll_seconds=section.poll_seconds,
        retry_base_seconds=section.retry_base_seconds,
        retry_max_seconds=section.retry_max_seconds,
        stop_timeout=section.stop_timeout_seconds,
    )


def retry_delay(config: JobConfig, attempts: int) -> float:
    """Exponential backoff with +-20% jitter: base, 2*base, 4*base, ... capped."""
    delay = min(config.retry_base_seconds * (2 ** max(attempts - 1, 0)), config.retry_max_seconds)
    return delay * random.uniform(0.8, 1.2)


class JobHost(Protocol):
    """What the queue and the runner need of the services bundle they hand to every job."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def jobs(self) -> JobQueue: ...


class JobQueue:
    def __init__(self, settings: Settings, kinds: Iterable[JobKind] = ()):
        self.settings = settings
        self.config = job_config(settings)
        self.kinds: dict[str, JobKind] = {kind.name: kind for kind in kinds}
        self._wakeup: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writer: CoalescingWriter | None = None

    def register(self, kind: JobKind) -> None:
        """Add a kind to this process's table (applications' own jobs, tests)."""
        self.kinds[kind.name] = kind

    def kind(self, name: str) -> JobKind:
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

    async def submit(
        self,
        services: JobHost,
        kind: str,
        payload: dict[str, Any],
        *,
        conn: Conn | None = None,
    ) -> int | None:
        """Run `kind` later: a durable row (queues on) or an in-process task (queues off)."""
        job_kind = self.kind(kind)
        if self.settings.section(JobSettings).queues_enabled or job_kind.durable:
            return await enqueue(conn or services.db, job_kind, payload, queue=self)
        lock_key = None
        if conn is not None and conn.in_transaction:
            # The task must not start before the caller's transaction ends.
            lock_key = secrets.randbits(31)
            await conn.execute(
                queries.INLINE_XACT_LOCK,
                {"c": INLINE_LOCK_CLASS, "k": lock_key},
            )
        self.spawn_inline(services, job_kind, payload, after_lock=lock_key)
        return None

    async def submit_many(
        self,
        services: JobHost,
        kind: str,
        payloads: Sequence[dict[str, Any]],
        *,
        conn: Conn | None = None,
    ) -> None:
        """`submit` for many payloads of one kind: one statement when queues are on."""
        job_kind = self.kind(kind)
        if not self.settings.section(JobSettings).queues_enabled:
            for payload in payloads:
                await self.submit(services, kind, payload, conn=conn)
            return
        if not payloads:
            return
        if conn is None:
            async with services.db.connection() as own:
                await queries.insert_jobs(
                    own, kind=job_kind.name, payloads=payloads, max_attempts=job_kind.max_attempts
                )
        else:
            await queries.insert_jobs(
                conn, kind=job_kind.name, payloads=payloads, max_attempts=job_kind.max_attempts
            )
        self.wake()

    async def enqueue_for_user(
        self, conn: Conn, kind: str, payload: dict[str, Any], *, user_id: uuid.UUID
    ) -> int | None:
        """Write a durable `kind` row in one statement, only if user `user_id` exists: its id,
        or None when there is no such user (nothing written)."""
        job_kind = self.kind(kind)
        job_id = await queries.insert_job_for_user(
            conn,
            kind=job_kind.name,
            payload=payload,
            max_attempts=job_kind.max_attempts,
            user_id=user_id,
        )
        if job_id is not None:
            self.wake()
        return job_id

    async def enqueue_for_user_grouped(
        self, db: Database, kind: str, payload: dict[str, Any], *, user_id: uuid.UUID
    ) -> int | None:
        """`enqueue_for_user` on a connection of its own, in one statement with the rows of
        other callers of this process that overlap it (group commit, jobs/coalesce.py)."""
        job_kind = self.kind(kind)
        writer = self._writer
        if writer is None or writer.db is not db:
            writer = self._writer = CoalescingWriter(db, on_written=self.wake)
        return await writer.enqueue_for_user(
            kind=job_kind.name,
            payload=payload,
            max_attempts=job_kind.max_attempts,
            user_id=user_id,
        )

    def spawn_inline(
        self,
        services: JobHost,
        kind: JobKind,
        payload: dict[str, Any],
        *,
        after_lock: int | None = None,
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self._run_inline(services, kind, payload, after_lock)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_inline(
        self, services: JobHost, kind: JobKind, payload: dict[str, Any], after_lock: int | None
    ) -> None:
        if after_lock is not None:
            async with services.db.connection() as conn:
                params = {"c": INLINE_LOCK_CLASS, "k": after_lock}
                await conn.execute(queries.INLINE_LOCK, params)
                await conn.execute(queries.INLINE_UNLOCK, params)
        attempts = 0
        while True:
            attempts += 1
            info = JobInfo(
                id=None, kind=kind.name, attempts=attempts, max_attempts=kind.max_attempts
            )
            try:
                await asyncio.wait_for(kind.run(services, payload, info), kind.timeout)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                permanent = isinstance(error, PermanentJobError)
                text = describe(error)
                if permanent or info.final_attempt:
                    log.warning("inline job %s failed for good: %s", kind.name, text)
                    await give_up(services, kind, payload, text)
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


async def enqueue(
    target: Database | Conn,
    kind: JobKind | str,
    payload: dict[str, Any],
    *,
    delay_seconds: float = 0.0,
    max_attempts: int | None = None,
    queue: JobQueue | None = None,
) -> int:
    """Write a durable job row; pass a Conn to make it part of the caller's transaction."""
    if isinstance(kind, str) and queue is not None and kind in queue.kinds:
        kind = queue.kinds[kind]
    name = kind if isinstance(kind, str) else kind.name
    attempts = max_attempts or (
        DEFAULT_MAX_ATTEMPTS if isinstance(kind, str) else kind.max_attempts
    )
    if isinstance(target, Database):
        async with target.connection() as conn:
            job_id = await queries.insert_job(
                conn, kind=name, payload=payload, max_attempts=attempts, delay_seconds=delay_seconds
            )
    else:
        job_id = await queries.insert_job(
            target, kind=name, payload=payload, max_attempts=attempts, delay_seconds=delay_seconds
        )
    if queue is not None:
        queue.wake()
    return job_id


async def enqueue_many(
    conn: Conn,
    kind: JobKind,
    payloads: list[dict[str, Any]],
    *,
    delays: list[float] | None = None,
    queue: JobQueue | None = None,
) -> list[int]:
    """Write many durable job rows of one kind in the caller's transaction; their ids in order."""
    ids = await queries.insert_jobs(
        conn,
        kind=kind.name,
        payloads=payloads,
        max_attempts=kind.max_attempts,
        delays=delays if delays is not None else [0.0] * len(payloads),
    )
    if queue is not None and ids:
        queue.wake()
    return ids


def describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:2000]


async def give_up(services: JobHost, kind: JobKind, payload: dict[str, Any], error: str) -> None:
    if kind.on_give_up is None:
        return
    try:
        await kind.on_give_up(services, payload, error)
    except Exception:
        log.exception("give-up hook of job %s failed", kind.name)
