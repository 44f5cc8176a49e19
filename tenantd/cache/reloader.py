"""A background task that reloads an in-memory copy on request and on a timer.

Copies fed by LISTEN/NOTIFY (signing keys, revocations) reload when an announcement or a
listener gap asks, and every `interval` seconds regardless, since a listener can die
silently. One task per copy; requests that arrive during a load ask for one more load.
"""

from __future__ import annotations

import asyncio
import contextlib


class Reloader:
    """Subclasses say how to load (`reload`) and what a failed load means (`reload_failed`,
    called from the `except` block, so it may log the exception)."""

    retry_seconds = 1.0

    def __init__(self, interval: float):
        self.interval = interval
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def request_reload(self, *_: object) -> None:
        self._wanted.set()

    async def reload(self) -> object:
        raise NotImplementedError

    def reload_failed(self) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wanted.wait()
            self._wanted.clear()
            try:
                await self.reload()
            except Exception:
                self.reload_failed()
                await asyncio.sleep(self.retry_seconds)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
