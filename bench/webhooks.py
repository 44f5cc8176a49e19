"""SendGrid event ingestion: signed batches of 500 events, several in flight."""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bench.rounds import ROUNDS, median_of

BATCH = 500


@lru_cache(maxsize=1)
def signing_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_key_pem() -> str:
    return (
        signing_key()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def batch_body(offset: int) -> bytes:
    kinds = ("bounce", "spamreport", "dropped", "delivered", "open")
    events = []
    for i in range(offset, offset + BATCH):
        kind = kinds[i % len(kinds)]
        event: dict[str, Any] = {
            "email": f"ingest{i}@bench-webhook.example",
            "timestamp": int(time.time()),
            "event": kind,
            "sg_event_id": uuid.uuid4().hex,
            "sg_message_id": f"msg{i}",
        }
        if kind == "bounce":
            event["type"] = "bounce"
        events.append(event)
    return orjson.dumps(events)


def sign(body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    signature = signing_key().sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def server_cpu_seconds(pid: str | None) -> float | None:
    """utime + stime of the server process (None when its pid is unknown)."""
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _ingest(
    url: str, batches: int, concurrency: int, server_pid: str | None = None
) -> dict[str, Any]:
    rounds = []
    async with aiohttp.ClientSession() as session:
        for round_ in range(ROUNDS):
            # Fresh addresses each round, so every round inserts as many suppressions.
            first = round_ * batches * BATCH
            before = server_cpu_seconds(server_pid)
            result = await _ingest_round(session, url, first, batches, concurrency)
            after = server_cpu_seconds(server_pid)
            if before is not None and after is not None:
                # What holds still on a shared machine, where the rate does not: the server's
                # CPU per event (the outbox relay's share of a round included).
                result["server_cpu_us_per_event"] = round(
                    1e6 * (after - before) / result["events"], 1
                )
            rounds.append(result)
    cpu = [r["server_cpu_us_per_event"] for r in rounds if "server_cpu_us_per_event" in r]
    summary = {**median_of(rounds), "unit": "events/s", "batch_size": BATCH}
    if cpu:
        summary["server_cpu_us_per_event"] = sorted(cpu)[len(cpu) // 2]
        summary["server_cpu_us_per_event_rounds"] = cpu
    return summary


async def _ingest_round(
    session: aiohttp.ClientSession, url: str, first: int, batches: int, concurrency: int
) -> dict[str, Any]:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for i in range(batches):
        queue.put_nowait(batch_body(first + i * BATCH))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while not queue.empty():
            body = queue.get_nowait()
            async with session.post(url, data=body, headers=sign(body)) as response:
                await response.read()
                if response.status != 200:
                    errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "rate": round(batches * BATCH / elapsed, 1),
        "batches": batches,
        "events": batches * BATCH,
        "errors": errors,
    }


def sendgrid_ingestion(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(
        _ingest(
            f"{server_url}/api/v1/webhooks/sendgrid",
            batches=200,
            concurrency=4,
            server_pid=env.get("BENCH_SERVER_PID"),
        )
    )
