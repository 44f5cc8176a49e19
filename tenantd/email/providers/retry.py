"""One bounded retry loop for the HTTP email providers.

Retried: connection errors, timeouts and 5xx answers. Never retried: 4xx answers (the same
request would be refused again); the provider module decides what a 4xx means.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from tenantd.email.message import EmailSendError

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # total tries, the first included
    base_delay: float = 0.25  # seconds before the 2nd try; doubled each time, with jitter
    max_delay: float = 2.0
    timeout: float = 10.0  # per request, connect included
    sleep: Sleep = asyncio.sleep

    def delay(self, retry: int) -> float:
        """Full-jitter exponential backoff for the n-th retry (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (retry - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]  # case-insensitive (a CIMultiDict copy)

    def json(self) -> Any:
        """The decoded JSON body, or None when it is not JSON."""
        try:
            return orjson.loads(self.body) if self.body else None
        except orjson.JSONDecodeError:
            return None

    def excerpt(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


async def post_json(
    http: aiohttp.ClientSession,
    url: str,
    *,
    payload: Any,
    headers: Mapping[str, str],
    policy: RetryPolicy,
    provider: str,
) -> Reply:
    """POST a JSON body; retry 5xx and transport errors; return the first non-5xx reply.

    Raises EmailSendError(retryable=True) once the tries are used up.
    """
    body = orjson.dumps(payload)
    request_headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        **headers,
    }
    timeout = aiohttp.ClientTimeout(total=policy.timeout)
    failure = ""
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            await policy.sleep(policy.delay(attempt - 1))
        try:
            async with http.post(
                url, data=body, headers=request_headers, timeout=timeout
            ) as response:
                reply = Reply(response.status, await response.read(), response.headers.copy())
        except (aiohttp.ClientError, TimeoutError) as error:
            # The message names the error type only: it never carries request headers (keys).
            failure = f"transport error {type(error).__name__}"
        else:
            if reply.status < 500:
                return reply
            failure = f"HTTP {reply.status}: {reply.excerpt()}"
        log.warning(
            "email provider attempt failed",
            extra={"provider": provider, "attempt": attempt, "failure": failure},
        )
    raise EmailSendError(
        f"{provider}: gave up after {policy.attempts} attempts ({failure})", retryable=True
    )


def refused(provider: str, reply: Reply, *, detail: str | None = None) -> EmailSendError:
    """A 4xx answer: 429 may succeed later (the job queue retries); anything else will not."""
    return EmailSendError(
        f"{provider}: HTTP {reply.status}: {detail or reply.excerpt()}",
        retryable=reply.status == 429,
    )
