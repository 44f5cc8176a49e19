"""Job kinds: what a durable job runs, and the table of every domain's kinds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenantd.services import Services


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: int | None  # None when the job runs inline (queues off)
    kind: str
    attempts: int  # this attempt, counting from 1
    max_attempts: int

    @property
    def final_attempt(self) -> bool:
        return self.attempts >= self.max_attempts


JobFn = Callable[["Services", dict[str, Any], JobInfo], Awaitable[None]]
GiveUpFn = Callable[["Services", dict[str, Any], str], Awaitable[None]]
# Runs several claimed jobs of one kind together (e.g. in one transaction); returns, per job,
# None for done or the exception it failed with.
BatchFn = Callable[
    ["Services", list[tuple[JobInfo, dict[str, Any]]]], Awaitable[list[BaseException | None]]
]


@dataclass(frozen=True)
class JobKind:
    """A job's code. `run` must be idempotent: a job may run again after a crash."""

    name: str
    run: JobFn
    # Called once when the job fails for good (attempts exhausted or a permanent error).
    on_give_up: GiveUpFn | None = None
    max_attempts: int = 8
    timeout: float = 60.0  # per attempt; the runner extends the lease meanwhile
    run_batch: BatchFn | None = None
    batch_size: int = 16  # jobs handed to run_batch at once


class PermanentJobError(Exception):
    """Retrying cannot help: the job fails at once."""


def job_kinds() -> dict[str, JobKind]:
    """Every domain's job kinds (imported here, like the route tables)."""
    from tenantd.auth.jobs import KINDS as AUTH_KINDS
    from tenantd.notifications.jobs import KINDS as NOTIFICATION_KINDS

    return {kind.name: kind for kind in (*AUTH_KINDS, *NOTIFICATION_KINDS)}
