"""One process of SSE clients for the 10,000-stream figure (`python -m bench.sse_fleet`).

Reads one JSON line on stdin ({"url", "tokens", "expected"}: `expected` messages per stream),
opens one stream per token, then writes JSON lines on stdout: {"ready", "failed"} once every
stream is open (or refused), {"complete": true} once every stream has received what it
expects, and on "stop" from stdin the result: latencies (receipt time minus createdAt, in s),
messages received and streams that ended or failed before the stop.

Several of these share the load core: one Python process parsing 10,000 streams would add its
own queueing to the latency it measures.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import resource
import sys
import time
from typing import Any

import aiohttp
import orjson

CONNECTING_AT_ONCE = 64  # under the server's listen backlog (128)


def raise_open_files_limit() -> None:
    """Each stream is a socket: the soft limit goes up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def created_at(line: bytes) -> float:
    message = orjson.loads(line[5:])
    value = message["notification"]["createdAt"]
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(message).decode() + "\n")
    sys.stdout.flush()


async def fleet(url: str, tokens: list[str], expected: int) -> dict[str, Any]:
    latencies: list[float] = []
    ended = 0
    failed = 0
    opened = 0
    attempted = 0
    complete_streams = 0
    all_attempted = asyncio.Event()
    all_complete = asyncio.Event()
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=None)

    def attempt_done() -> None:
        nonlocal attempted
        attempted += 1
        if attempted == len(tokens):
            all_attempted.set()

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client(token: str) -> None:
            nonlocal ended, failed, opened, complete_streams
            got = 0
            headers = {"Cookie": f"auth_token={token}", "Accept": "text/event-stream"}
            try:
                async with gate:
                    response = await session.get(
                        f"{url}/api/v1/notifications/stream", headers=headers
                    )
            except (aiohttp.ClientError, OSError):
                failed += 1
                attempt_done()
                return
            try:
                if response.status != 200:
                    failed += 1
                    attempt_done()
                    return
                opened += 1
                attempt_done()
                async for line in response.content:
                    if not line.startswith(b"data:"):
                        continue
                    latencies.append(time.time() - created_at(line))
                    got += 1
                    if got == expected:
                        complete_streams += 1
                        if complete_streams == opened and all_attempted.is_set():
                            all_complete.set()
                ended += 1  # the server ended the stream
            except (aiohttp.ClientError, OSError):
                ended += 1
            finally:
                response.release()

        tasks = [asyncio.create_task(client(token)) for token in tokens]
        await all_attempted.wait()
        emit({"ready": opened, "failed": failed})
        if expected == 0 or (opened and complete_streams == opened):
            all_complete.set()

        async def announce_complete() -> None:
            await all_complete.wait()
            emit({"complete": True})

        announcer = asyncio.create_task(announce_complete())
        await asyncio.to_thread(sys.stdin.readline)  # "stop"
        still_open = opened - ended
        announcer.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, announcer, return_exceptions=True)
    return {
        "opened": opened,
        "failed": failed,
        "ended": opened - still_open,
        "received": len(latencies),
        "latencies": latencies,
    }


def main() -> None:
    raise_open_files_limit()
    spec = orjson.loads(sys.stdin.readline())
    # Receipt times are taken here: a full collection over thousands of streams' objects
    # would count as server latency, so this process does not collect.
    gc.collect()
    gc.freeze()
    gc.disable()
    emit(asyncio.run(fleet(spec["url"], spec["tokens"], spec["expected"])))


if __name__ == "__main__":
    main()
