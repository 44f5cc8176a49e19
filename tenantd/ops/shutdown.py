"""The shutdown bound of `tenantd serve`.

SIGTERM makes aiohttp stop accepting, run the on_shutdown hooks (SSE streams end, the
sweep scheduler stops ticking), wait for requests in flight, then close every cleanup_ctx
resource in reverse: SSE listener, scheduler, job runner (running jobs finish or go back
to the queue), pools. Each step has its own timeout; this watchdog bounds the sum: if the
process is still shutting down TENANTD_SHUTDOWN_TIMEOUT_SECONDS after SIGTERM, it logs and
exits at once (an unfinished job's lease then runs out and another instance claims it).
systemd's TimeoutStopSec is set a few seconds above that bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from tenantd.ops.config import ops_config
from tenantd.settings import SETTINGS

log = logging.getLogger(__name__)

FORCED_EXIT_STATUS = 1


class Watchdog:
    """Calls `on_expire` (default: exit the process) unless disarmed within `seconds`."""

    def __init__(self, seconds: float, on_expire: Callable[[], None] | None = None):
        self.seconds = seconds
        self.on_expire = on_expire or self._exit
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is not None:
            return
        self._timer = threading.Timer(self.seconds, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expired(self) -> None:
        log.error("shutdown took longer than %.0f s; exiting now", self.seconds)
        self.on_expire()

    @staticmethod
    def _exit() -> None:
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(FORCED_EXIT_STATUS)


async def shutdown_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook, registered first: the watchdog is armed when shutdown starts and
    disarmed after every other cleanup_ctx resource (the pools included) is closed. Being
    first, its exit runs last, and aiohttp runs every exit even when one of them fails, so a
    failed cleanup cannot leave the watchdog armed (an on_cleanup handler would be skipped)."""
    loop = asyncio.get_running_loop()

    def expire() -> None:
        # A loop already closed means the application finished after all (an embedding
        # process, e.g. a test run, lives on): never take such a process down.
        if not loop.is_closed():
            log_pending_tasks(loop)
            Watchdog._exit()

    watchdog = Watchdog(ops_config(app[SETTINGS]).shutdown_timeout_seconds, expire)

    async def arm(_app: web.Application) -> None:
        log.info("shutting down (bound %.0f s)", watchdog.seconds)
        watchdog.arm()

    app.on_shutdown.append(arm)
    try:
        yield
    finally:
        watchdog.disarm()


def log_pending_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """What the shutdown still waits for: each pending task's coroutine and where it stands
    (read from the watchdog's thread: a best-effort picture, never raises)."""
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed while read
        return
    for task in tasks[:50]:
        frames = task.get_stack(limit=3)
        where = "; ".join(
            f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
            for frame in frames
        )
        line = f"shutdown still waits for {task.get_coro()!r} at {where or '?'}"
        log.error("%s", line)
        # Also straight to the process's stderr: the forced exit that follows skips whatever
        # a log handler still buffers (and an embedding test run captures log records).
        print(line, file=sys.__stderr__, flush=True)
