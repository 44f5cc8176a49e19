"""What aiohttp logs about requests its HTTP parser rejects (a NUL in a header, a line too
long, garbage instead of a request line).

aiohttp answers those with 400 and logs each one with its traceback at error level, so
anyone could fill the error log. A rejection is the client's fault, not ours: `ServerLog`
(given to aiohttp's request handler as its logger) turns each into one warning line that
names the kind of fault but never the offending bytes (they may carry a header's secret),
at most PARSER_WARNINGS_PER_WINDOW per WINDOW_SECONDS per process; past that it counts them
and says how many in one line when the window ends. Anything else aiohttp logs is passed to
its own `aiohttp.server` logger unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("tenantd.http")

PARSER_WARNINGS_PER_WINDOW = 10
WINDOW_SECONDS = 60.0
REASON_MAX_CHARS = 80


def rejection_reason(error: HttpProcessingError) -> str:
    """The parser's reason without the request bytes it quotes: aiohttp's messages put them
    after a colon ("Invalid header value char:\\n\\n  b'X-Key: ...'")."""
    lines = str(error.message or "").strip().splitlines()
    reason = lines[0].split(":", 1)[0].strip() if lines else ""
    return reason[:REASON_MAX_CHARS] or type(error).__name__


class ServerLog:
    """Stands in for the `aiohttp.server` logger of one application (see the module doc)."""

    def __init__(
        self,
        *,
        limit: int = PARSER_WARNINGS_PER_WINDOW,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        server_logger: logging.Logger | None = None,
    ) -> None:
        self.limit = limit
        self.window = window
        self.clock = clock
        self.logger = server_logger or logging.getLogger("aiohttp.server")
        self._window_start = float("-inf")
        self._logged = 0
        self._unlogged = 0
        self._summary: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.logger, name)  # debug, warning, ... as aiohttp's logger

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.rejected(exc_info, remote=args[0] if args else None)
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)

    def rejected(self, error: HttpProcessingError, *, remote: object = None) -> None:
        """One request the parser refused: a warning line, or a count past the limit."""
        self._roll()
        if self._logged < self.limit:
            self._logged += 1
            log.warning(
                "rejected a malformed request from %s: %s (%s %s)",
                remote or "?",
                rejection_reason(error),
                error.code,
                type(error).__name__,
            )
            return
        self._unlogged += 1
        if self._summary is None:
            with_loop = _running_loop()
            if with_loop is not None:
                delay = max(self._window_start + self.window - self.clock(), 0.0)
                self._summary = with_loop.call_later(delay, self._roll, True)

    def _roll(self, due: bool = False) -> None:
        """At the end of a window (`due`: its timer fired): say how many went unlogged, then
        start counting again."""
        now = self.clock()
        if not due and now < self._window_start + self.window:
            return
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        if self._unlogged:
            log.warning(
                "rejected %d more malformed request(s) in the last %.0f s (not logged one by one)",
                self._unlogged,
                self.window,
            )
        self._window_start = now
        self._logged = 0
        self._unlogged = 0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
