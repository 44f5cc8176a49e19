"""The in-process scheduler of `tenantd serve`: APScheduler (AsyncIOScheduler) ticks every
sweep every TENANTD_SCHEDULER_TICK_SECONDS; `run_sweep` then decides, under the sweep's
advisory lock and from `sweep_runs`, whether it is due. Every instance ticks, one runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Iterable

from aiohttp import web
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from tenantd.ops.config import SchedulerSettings
from tenantd.ops.metrics import Metrics
from tenantd.ops.sweeps import Sweep, SweepHost, SweepOutcome, run_sweep

log = logging.getLogger(__name__)

STOP_WAIT_SECONDS = 5.0  # a running sweep stops at its next batch boundary, well within this
# A sweep holds one pooled connection for its advisory lock and takes another for its work.
# Sweeps due together (all of them, at start-up) would each take a lock connection first and
# could leave none for the work: the pool starved until its acquire timeout and every sweep
# failed. One at a time per process needs two connections whatever the pool's size; other
# instances still run other sweeps at the same time.
SWEEPS_AT_ONCE = 1


class SweepScheduler:
    """Owns the APScheduler instance and the sweeps it started."""

    def __init__(
        self,
        services: SweepHost,
        config: SchedulerSettings,
        metrics: Metrics | None = None,
        *,
        sweeps: Iterable[Sweep],
    ):
        self.services = services
        self.sweeps = list(sweeps)
        self.config = config
        self.metrics = metrics
        self.stopping = asyncio.Event()
        self.running: set[asyncio.Task[SweepOutcome | None]] = set()
        self.slots = asyncio.Semaphore(SWEEPS_AT_ONCE)
        self.scheduler = AsyncIOScheduler(timezone=dt.UTC)

    def start(self) -> None:
        tick = self.config.tick_seconds
        now = dt.datetime.now(dt.UTC)
        for sweep in self.sweeps:
            self.scheduler.add_job(
                self.tick,
                IntervalTrigger(seconds=tick, timezone=dt.UTC),
                args=[sweep],
                id=f"sweep:{sweep.name}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
                # Spread the first ticks so instances started together do not all race.
                next_run_time=now + dt.timedelta(seconds=random.uniform(0, min(tick, 5.0))),
            )
        self.scheduler.start()

    async def tick(self, sweep: Sweep) -> SweepOutcome | None:
        """One scheduled attempt: run the sweep if it is due and nobody else is running it."""
        if self.stopping.is_set():
            return None
        task = asyncio.current_task()
        if task is not None:
            self.running.add(task)
        try:
            async with self.slots:
                if self.stopping.is_set():
                    return None
                outcome = await run_sweep(
                    self.services,
                    sweep,
                    interval=self.config.intervals().get(sweep.name, 3600),
                    batch_size=self.config.batch_size,
                    batch_pause=self.config.batch_pause_ms / 1000,
                    stopping=self.stopping,
                    on_batch=self.metrics.sweep_batch if self.metrics else None,
                )
        except Exception:
            log.exception("scheduled sweep %s could not run", sweep.name)
            return None
        finally:
            if task is not None:
                self.running.discard(task)
        if self.metrics is not None and outcome.ran:
            self.metrics.sweep_runs.labels(sweep.name, outcome.status).inc()
        return outcome

    async def stop(self, grace: float = STOP_WAIT_SECONDS) -> None:
        """Stop ticking; running sweeps end at a batch boundary (cancelled after `grace` s)."""
        self.stopping.set()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        pending = set(self.running)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=1.0)


SCHEDULER = web.AppKey("scheduler", SweepScheduler)
