"""Cross-instance SSE latency on each bus (issue 31), end to end.

For each TENANTD_BUS (postgres, nats, redis): two `tenantd serve` on the bench database, an
SSE reader on B, and `POST /api/v1/notifications/send` (an API key) to A, one at a time; each
is timed from the moment the POST leaves to the moment its frame arrives on B's stream. That
is A's request and inline dispatch (the rows, the announcement after commit), the bus hop,
B's read of the delivery and its frame write (bench/bus_latency.py times the bus hop alone).

A latency is no throughput, so the figure's "x hello" (`p50_hello_round_trips`) is its p50
in units of one bare aiohttp hello-world round trip, timed one request at a time in the same
run (lower is better, unlike the throughput ratios).
A bus that is not reachable (NATS_URL, REDIS_URL as the server reads them) gives no figure.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

BUSES = ("postgres", "nats", "redis")
FIGURES = tuple(f"sse_cross_instance_{kind}" for kind in BUSES)
MESSAGES = 300
WARM_UP = 20
WAIT_SECONDS = 10.0


def figure_name(kind: str) -> str:
    return f"sse_cross_instance_{kind}"


def quantiles(latencies: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(latencies, n=100)
    return round(cuts[49], 2), round(cuts[98], 2)


async def hello_round_trip_ms(url: str, n: int = 300) -> float:
    """p50 of one GET to the hello-world, one at a time (the unit of the latency ratio)."""
    times = []
    async with aiohttp.ClientSession() as session:
        for i in range(n + WARM_UP):
            began = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            if i >= WARM_UP:
                times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


async def _cross(a_url: str, b_url: str, token: str, key: str, user: uuid.UUID) -> list[float]:
    arrived: asyncio.Queue[tuple[bytes, float]] = asyncio.Queue()
    latencies: list[float] = []
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        headers = {"Cookie": f"auth_token={token}", "Accept": "text/event-stream"}
        stream = await session.get(f"{b_url}/api/v1/notifications/stream", headers=headers)
        if stream.status != 200:
            raise RuntimeError(f"stream on B answered {stream.status}")

        async def read() -> None:
            async for line in stream.content:
                if line.startswith(b"data:"):
                    arrived.put_nowait((line, time.perf_counter()))

        reader = asyncio.get_running_loop().create_task(read())
        send_headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        try:
            for n in range(MESSAGES + WARM_UP):
                body = {"type": "bench.event", "recipientUserId": str(user), "payload": {"n": n}}
                mark = f'"Benchmark {n}"'.encode()
                began = time.perf_counter()
                send_url = f"{a_url}/api/v1/notifications/send"
                post = session.post(send_url, data=orjson.dumps(body), headers=send_headers)
                async with post as response:
                    if response.status != 202:
                        raise RuntimeError(f"send on A answered {response.status}")
                while True:
                    line, at = await asyncio.wait_for(arrived.get(), WAIT_SECONDS)
                    if mark in line:
                        break
                if n >= WARM_UP:
                    latencies.append((at - began) * 1000)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            stream.close()
    return latencies


def measure(
    kind: str,
    start_pair: Callable[[dict[str, str]], Any],
    token: str,
    key: str,
    user: uuid.UUID,
    hello_ms: float | None,
) -> dict[str, Any]:
    """One bus's figure; `start_pair(overrides)` starts A and B and is a context manager that
    yields their URLs."""
    with start_pair({"TENANTD_BUS": kind}) as (a_url, b_url):
        latencies = asyncio.run(_cross(a_url, b_url, token, key, user))
    p50, p99 = quantiles(latencies)
    figure: dict[str, Any] = {"bus": kind, "p50_ms": p50, "p99_ms": p99, "messages": len(latencies)}
    if hello_ms:
        figure["hello_round_trip_ms"] = round(hello_ms, 3)
        figure["p50_hello_round_trips"] = round(p50 / hello_ms, 1)
    return figure


def user_of(token: str) -> uuid.UUID:
    """The subject of an access token (its payload, unverified: the bench made it)."""
    payload = token.split(".")[1]
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return uuid.UUID(claims["sub"])
