"""Server callers (issue 15): an API key made by the real CLI; notifications accepted through
`POST /api/v1/notifications/send-batch` (1,000 items per request, several in flight)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import aiohttp
import orjson

from bench.rounds import ROUNDS, median_of
from bench.seed import user_uuid

BATCH = 1000
IN_FLIGHT = 4
BATCHES_PER_ROUND = 20


def create_key(env: dict[str, str], scopes: str = "notifications:send") -> str:
    """`tenantd api-keys create` as an operator runs it; the token it prints."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tenantd",
            "api-keys",
            "create",
            "--name",
            "bench",
            "--scopes",
            scopes,
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def batch_body(first: int, users: int) -> bytes:
    items = [
        {
            "type": "bench.event",
            "recipientUserId": user_uuid((n % users) + 1),
            "payload": {"n": n},
        }
        for n in range(first, first + BATCH)
    ]
    return orjson.dumps({"items": items})


async def _round(url: str, token: str, users: int, first: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = [batch_body(first + i * BATCH, users) for i in range(BATCHES_PER_ROUND)]
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    failures = 0
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal failures
            while not queue.empty():
                body = queue.get_nowait()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    failures += response.status != 202

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
    count = BATCH * BATCHES_PER_ROUND
    return {"rate": round(count / elapsed, 1), "count": count, "failures": failures}


def send_batch(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """Notifications/s accepted (202) through send-batch; queues on, so the server's runner
    dispatches them meanwhile on the same core."""
    token = create_key(env)
    url = f"{server_url}/api/v1/notifications/send-batch"
    users = min(plan.users, 100_000)

    async def run() -> dict[str, Any]:
        await _round(url, token, users, 0)  # warm-up: key cached, pool and plans ready
        rounds = [
            await _round(url, token, users, 1_000_000 + r * BATCH * BATCHES_PER_ROUND)
            for r in range(ROUNDS)
        ]
        return {**median_of(rounds), "unit": "notifications/s", "batch": BATCH}

    return asyncio.run(run())
