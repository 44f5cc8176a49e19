"""Job kinds: what a job runs. Each domain declares its own (`JobKind`, its functions taking
the domain's services first); the composition root (tenantd/app/) binds them to those
services (`JobKind.bind`) and gives the queue the bound kinds (`BoundKind`), so the queue
never holds or passes a services bundle."""

from __future__ import annotations

import functools
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


# Declared: the first argument is the services the composition root binds the kind to.
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

    def bind(self, services: Any) -> BoundKind:
        """This kind with its functions bound to the services they use."""
        return BoundKind(
            name=self.name,
            run=functools.partial(self.run, services),
            on_give_up=(
                None if self.on_give_up is None else functools.partial(self.on_give_up, services)
            ),
            run_batch=(
                None if self.run_batch is None else functools.partial(self.run_batch, services)
            ),
            max_attempts=self.max_attempts,
            timeout=self.timeout,
            batch_size=self.batch_size,
            durable=self.durable,
        )


@dataclass(frozen=True)
class BoundKind:
    """A kind as the queue and the runner hold it: its functions need only the job."""

    name: str
    run: Callable[[dict[str, Any], JobInfo], Awaitable[None]]
    on_give_up: Callable[[dict[str, Any], str], Awaitable[None]] | None
    run_batch: (
        Callable[[list[tuple[JobInfo, dict[str, Any]]]], Awaitable[list[BaseException | None]]]
        | None
    )
    max_attempts: int
    timeout: float
    batch_size: int
    durable: bool


class PermanentJobError(Exception):
    """Retrying cannot help: the job fails at once."""
