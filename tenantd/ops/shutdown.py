"""The shutdown of `tenantd serve`: the drain of open connections and the bound of the whole.

SIGTERM (`DrainingRunner.drain`) stops the listener, runs the on_shutdown hooks (SSE streams
end, the sweep scheduler stops ticking, this watchdog arms), and drains the open connections
for up to TENANTD_SHUTDOWN_DRAIN_SECONDS: a request in flight or arriving meanwhile on an open
keep-alive connection is served and answered with `Connection: close`, and its connection
closes after that answer; the drain ends as soon as none is left. Only connections idle for
the whole drain are closed without a last answer. Then aiohttp waits for what is still in
flight and every cleanup_ctx resource closes in reverse: SSE listener, scheduler, job runner
(running jobs finish or go back to the queue), pools. Each step has its own timeout; the
watchdog bounds the sum: if the process is still shutting down
TENANTD_SHUTDOWN_TIMEOUT_SECONDS after SIGTERM, it logs and exits at once (an unfinished
job's lease then runs out and another instance claims it). systemd's TimeoutStopSec is set a
few seconds above that bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from tenantd.ops.config import ProcessSettings
from tenantd.settings import SETTINGS

log = logging.getLogger(__name__)

FORCED_EXIT_STATUS = 1
DRAIN_POLL_SECONDS = 0.02


class Drain:
    """Whether this process is draining (SIGTERM came): every answer then closes its
    connection. Process-wide, as the signal is; the request envelope reads it."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


DRAIN = Drain()


class DrainingRunner(web.AppRunner):
    """aiohttp's AppRunner with a drain before its cleanup (see the module docstring)."""

    def __init__(self, app: web.Application, **kwargs: Any):
        super().__init__(app, **kwargs)
        self._shut_down = False

    async def drain(self, seconds: float) -> None:
        """Stop listening, run on_shutdown, then let open connections finish within
        `seconds`, each closed after its next answer (Connection: close)."""
        for site in list(self.sites):
            await site.stop()
        DRAIN.active = True
        await self.shutdown()
        server = self.server
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        # aiohttp signals no "last connection gone": look every DRAIN_POLL_SECONDS.
        while server is not None and server.connections and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        left = len(server.connections) if server is not None else 0
        log.info("drained open connections", extra={"idle_closed": left})

    async def shutdown(self) -> None:
        """The app's on_shutdown hooks, once (the drain runs them before the cleanup does)."""
        if not self._shut_down:
            self._shut_down = True
            await super().shutdown()


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

    watchdog = Watchdog(app[SETTINGS].section(ProcessSettings).shutdown_timeout_seconds, expire)

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
