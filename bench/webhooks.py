"""SendGrid event ingestion: signed batches of 500 events, several in flight."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from functools import lru_cache
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


async def _ingest(url: str, batches: int, concurrency: int) -> dict[str, Any]:
    rounds = []
    async with aiohttp.ClientSession() as session:
        for round_ in range(ROUNDS):
            # Fresh addresses each round, so every round inserts as many suppressions.
            first = round_ * batches * BATCH
            rounds.append(await _ingest_round(session, url, first, batches, concurrency))
    return {**median_of(rounds), "unit": "events/s", "batch_size": BATCH}


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
    return {"rate": round(batches * BATCH / elapsed, 1), "batches": batches, "errors": errors}


def sendgrid_ingestion(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    return asyncio.run(
        _ingest(f"{server_url}/api/v1/webhooks/sendgrid", batches=200, concurrency=4)
    )
