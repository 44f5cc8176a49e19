"""Job kinds: what a durable job runs. Each domain lists its own; the queue is given them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: int | None  # None when the job runs inline (queues off)
    kind: str
    attempts: int  # this attempt, counting from 1
    max_attempts: int

    @property
    def final_attempt(self) -> bool:
        return self.attempts >= self.max_attempts


# The first argument is the services bundle the queue was bound to (opaque to the queue).
JobFn = Callable[[Any, dict[str, Any], JobInfo], Awaitable[None]]
GiveUpFn = Callable[[Any, dict[str, Any], str], Awaitable[None]]
# Runs several claimed jobs of one kind together (e.g. in one transaction); returns, per job,
# None for done or the exception it failed with.
BatchFn = Callable[
    [Any, list[tuple[JobInfo, dict[str, Any]]]], Awaitable[list[BaseException | None]]
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
    # Always a durable row, even with QUEUES_ENABLED off (the runner then claims only these):
    # for promises made to the outside that must survive a crash (webhook deliveries).
    durable: bool = False


class PermanentJobError(Exception):
    """Retrying cannot help: the job fails at once."""
