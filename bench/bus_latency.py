"""Cross-instance latency of the bus (TENANTD_BUS): one process's publish to another
subscriber's callback, p50/p99, for each bus that is reachable.

Two buses in one process stand for two instances (each has its own connection to the
server); N messages are published one at a time and each is timed until the other bus
delivers it. This is the bus hop of cross-instance SSE (the rest, the row read and the
frame write, is the same on every bus and measured by bench/sse_fleet.py).

    PYTHONPATH=$PWD .venv/bin/python -m bench.bus_latency [--n 500]
    (postgres too when DATABASE_URL is set; NATS_URL and REDIS_URL as the server reads them)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from tenantd.db.dsn import url_to_dsn
from tenantd.pubsub import Bus, PubSubHub
from tenantd.pubsub.nats_bus import NatsBus
from tenantd.pubsub.redis_bus import RedisBus


def buses() -> dict[str, tuple[Bus, Bus]]:
    found: dict[str, tuple[Bus, Bus]] = {}
    url = os.environ.get("DATABASE_URL")
    if url:
        dsn = url_to_dsn(url)
        found["postgres"] = (PubSubHub(dsn), PubSubHub(dsn))
    nats_url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    found["nats"] = (NatsBus(nats_url), NatsBus(nats_url))
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    found["redis"] = (RedisBus(redis_url), RedisBus(redis_url))
    return found


async def measure(sender: Bus, receiver: Bus, n: int) -> list[float]:
    await sender.start()
    await receiver.start()
    arrived: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
    channel = f"bench:{os.getpid()}"
    await receiver.subscribe(channel, lambda _c, p: arrived.put_nowait((p, time.perf_counter())))
    latencies: list[float] = []
    try:
        for i in range(n + 20):  # the first 20 warm up
            began = time.perf_counter()
            sender.publish(channel, str(i))
            payload, at = await asyncio.wait_for(arrived.get(), 5)
            assert payload == str(i)
            if i >= 20:
                latencies.append((at - began) * 1000)
    finally:
        await sender.close()
        await receiver.close()
    return latencies


async def main(n: int) -> None:
    for kind, (sender, receiver) in buses().items():
        try:
            latencies = await measure(sender, receiver, n)
        except Exception as error:
            print(f"{kind:9} unreachable: {error!r}")
            continue
        cuts = statistics.quantiles(latencies, n=100)
        print(f"{kind:9} p50 {cuts[49]:.3f} ms  p99 {cuts[98]:.3f} ms  (n={len(latencies)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    asyncio.run(main(parser.parse_args().n))
