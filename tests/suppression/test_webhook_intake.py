"""How the webhook routes take a request in: signature headers are judged before the body is
read (raw sockets that never send the body they announce), and only a few bodies are read or
held at once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tenantd.db import Database
from tenantd.suppression.webhooks.views import BODY_GATE, BUSY_RETRY_AFTER, BodyGate
from tests.email.support import Start
from tests.helpers import eventually
from tests.suppression.test_resend_webhook import SECRET, event, svix_headers
from tests.suppression.test_sendgrid_webhook import (
    PUBLIC_DER_B64,
    SIGNATURE,
    TIMESTAMP,
    batch,
    sg_event,
)
from tests.suppression.test_sendgrid_webhook import sign as sendgrid_sign

RESEND = "/api/v1/webhooks/resend"
SENDGRID = "/api/v1/webhooks/sendgrid"
TEN_MIB = 10 * 1024 * 1024
BOUND = 30.0  # generous: the server answers at once, the bound only stops a hung test


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def parse(raw: bytes) -> RawAnswer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return RawAnswer(int(status_line.split(" ")[1]), headers, body)


def dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def request_head(path: str, headers: dict[str, str], *, content_length: int) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {content_length}"]
    lines += [f"{name}: {value}" for name, value in headers.items() if name != "Content-Length"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class RawConnection:
    """One client socket: send what we like, then read the answer until the server closes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, client: TestClient[Any, Any]) -> RawConnection:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer_then_close(self) -> RawAnswer:
        """The whole answer; returning at all proves the server closed the connection."""
        async with asyncio.timeout(BOUND):
            raw = await self.reader.read()  # until EOF
        self.writer.close()
        return parse(raw)


def gate_of(client: TestClient[Any, Any]) -> BodyGate:
    return client.server.app[BODY_GATE]


async def suppressed(db: Database) -> list[str]:
    rows = await db.fetch_all("SELECT email FROM email_suppressions ORDER BY email")
    return [row["email"] for row in rows]


@pytest.fixture
async def both(start: Start) -> TestClient[Any, Any]:
    return await start(RESEND_WEBHOOK_SECRET=SECRET, SENDGRID_WEBHOOK_PUBLIC_KEY=PUBLIC_DER_B64)


# --- refused before the body is read ----------------------------------------------------------


def _resend_headers(mangle: str) -> dict[str, str]:
    headers = svix_headers(event("email.bounced", "x@example.com"))
    if mangle == "missing":
        return {"Content-Type": "application/json"}
    if mangle == "stale":
        return svix_headers(b"{}", at=time.time() - 3600)
    if mangle == "future":
        return svix_headers(b"{}", at=time.time() + 3600)
    if mangle == "malformed-signature":
        headers["svix-signature"] = "v1,!!!not-base64!!!"
    elif mangle == "no-v1-entry":
        headers["svix-signature"] = "v2," + headers["svix-signature"].split(",", 1)[1]
    elif mangle == "malformed-timestamp":
        headers["svix-timestamp"] = "12.5"
    elif mangle == "standard-names-stale":
        stale = svix_headers(b"{}", at=time.time() - 3600)
        return {
            "webhook-id": stale["svix-id"],
            "webhook-timestamp": stale["svix-timestamp"],
            "webhook-signature": stale["svix-signature"],
        }
    return headers


def _sendgrid_headers(mangle: str) -> dict[str, str]:
    headers = sendgrid_sign(batch(sg_event("bounce", "x@example.com")))
    if mangle == "missing":
        return {"Content-Type": "application/json"}
    if mangle == "stale":
        return sendgrid_sign(b"[]", at=time.time() - 3600)
    if mangle == "future":
        return sendgrid_sign(b"[]", at=time.time() + 3600)
    if mangle == "malformed-signature":
        headers[SIGNATURE] = "!!!not base64!!!"
    elif mangle == "no-v1-entry":
        headers[SIGNATURE] = "AAAA"  # base64, but not a DER ECDSA signature
    elif mangle == "malformed-timestamp":
        headers[TIMESTAMP] = "1.5"
    elif mangle == "timestamp-missing":
        del headers[TIMESTAMP]
    return headers


COMMON = ["missing", "stale", "future", "malformed-signature", "no-v1-entry", "malformed-timestamp"]
CASES = [
    *((RESEND, mangle) for mangle in [*COMMON, "standard-names-stale"]),
    *((SENDGRID, mangle) for mangle in [*COMMON, "timestamp-missing"]),
]


@pytest.mark.parametrize("content_length", [TEN_MIB, 10 * 1024**3])
@pytest.mark.parametrize(("path", "mangle"), CASES)
async def test_bad_headers_get_401_without_the_body_being_waited_for(
    both: TestClient[Any, Any], db: Database, path: str, mangle: str, content_length: int
) -> None:
    headers = _resend_headers(mangle) if path == RESEND else _sendgrid_headers(mangle)
    connection = await RawConnection.open(both)
    # The announced body is never sent: an answer at all means nobody waited for it.
    await connection.send(request_head(path, headers, content_length=content_length))
    answer = await connection.answer_then_close()
    assert answer.status == 401, answer
    assert answer.headers.get("connection", "").lower() == "close"
    assert answer.json["error"]["code"] == "UNAUTHORIZED"
    assert gate_of(both).held == 0
    assert await suppressed(db) == []


async def test_a_plausible_request_is_still_read_and_applied(
    both: TestClient[Any, Any], db: Database
) -> None:
    body = event("email.bounced", "slow@example.com")
    connection = await RawConnection.open(both)
    head = request_head(
        RESEND, {**svix_headers(body), "Connection": "close"}, content_length=len(body)
    )
    await connection.send(head + body[:10])
    await eventually(lambda: gate_of(both).held == 1)
    await connection.send(body[10:])
    answer = await connection.answer_then_close()
    assert answer.status == 200, answer
    assert await suppressed(db) == ["slow@example.com"]


async def test_a_body_that_never_arrives_frees_its_slot(
    both: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(both)
    gate.read_seconds = 0.3
    body = event("email.bounced", "never@example.com")
    connection = await RawConnection.open(both)
    await connection.send(request_head(RESEND, svix_headers(body), content_length=len(body)))
    answer = await connection.answer_then_close()
    assert answer.status == 408, answer
    assert answer.headers.get("connection", "").lower() == "close"
    assert gate.held == 0
    assert await suppressed(db) == []


# --- the cap on bodies in memory -------------------------------------------------------------


@dataclass
class Holder:
    """A plausible delivery whose body is half sent: it holds a slot until `finish`."""

    connection: RawConnection
    rest: bytes

    async def finish(self) -> RawAnswer:
        await self.connection.send(self.rest)
        return await self.connection.answer_then_close()


async def hold_slot(client: TestClient[Any, Any], address: str) -> Holder:
    body = event("email.bounced", address)
    headers = {**svix_headers(body), "Connection": "close"}
    connection = await RawConnection.open(client)
    await connection.send(request_head(RESEND, headers, content_length=len(body)) + body[:20])
    return Holder(connection, body[20:])


@pytest.fixture
async def capped(start: Start) -> TestClient[Any, Any]:
    return await start(
        RESEND_WEBHOOK_SECRET=SECRET,
        TENANTD_WEBHOOK_MAX_BODIES="2",
        TENANTD_WEBHOOK_MAX_BODIES_PER_CLIENT="2",  # every test client is 127.0.0.1
    )


async def test_over_the_cap_a_delivery_waits_then_gets_503_with_retry_after(
    capped: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(capped)
    assert gate.limit == 2
    gate.wait = 0.3  # the test does not wait the production 10 s
    holders = [await hold_slot(capped, f"hold{i}@example.com") for i in range(2)]
    await eventually(lambda: gate.held == 2)
    body = event("email.bounced", "third@example.com")
    response = await capped.post(RESEND, data=body, headers=svix_headers(body))
    assert response.status == 503, await response.text()
    assert response.headers["Retry-After"] == str(BUSY_RETRY_AFTER)
    assert response.headers.get("Connection", "").lower() == "close"
    assert (await response.json())["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert gate.held == 2
    answers = await asyncio.gather(*(holder.finish() for holder in holders))
    assert [a.status for a in answers] == [200, 200]
    assert gate.held == 0
    retried = await capped.post(RESEND, data=body, headers=svix_headers(body))
    assert retried.status == 200
    assert await suppressed(db) == ["hold0@example.com", "hold1@example.com", "third@example.com"]


async def test_concurrent_deliveries_over_the_cap_queue_for_a_slot(
    capped: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(capped)
    gate.wait = 120.0  # long enough for any machine: the test releases the slots itself
    holders = [await hold_slot(capped, f"hold{i}@example.com") for i in range(2)]
    await eventually(lambda: gate.held == 2)
    bodies = [event("email.bounced", f"queued{i}@example.com") for i in range(4)]
    posts = asyncio.gather(
        *(capped.post(RESEND, data=body, headers=svix_headers(body)) for body in bodies)
    )
    await eventually(lambda: gate.waiting == 4)
    assert gate.held == 2  # four complete requests wait; none is read beyond the cap
    answers = await asyncio.gather(*(holder.finish() for holder in holders))
    responses = await posts
    assert [a.status for a in answers] == [200, 200]
    assert [r.status for r in responses] == [200] * 4
    assert gate.held == 0 and gate.waiting == 0
    assert len(await suppressed(db)) == 6


async def test_the_cap_is_per_process_and_counts_both_routes(start: Start, db: Database) -> None:
    client = await start(
        RESEND_WEBHOOK_SECRET=SECRET,
        SENDGRID_WEBHOOK_PUBLIC_KEY=PUBLIC_DER_B64,
        TENANTD_WEBHOOK_MAX_BODIES="1",
    )
    gate = gate_of(client)
    gate.wait = 0.3
    holder = await hold_slot(client, f"{uuid.uuid4().hex}@example.com")
    await eventually(lambda: gate.held == 1)
    body = batch(sg_event("bounce", "sg@example.com"))
    response = await client.post(SENDGRID, data=body, headers=sendgrid_sign(body))
    assert response.status == 503
    assert (await holder.finish()).status == 200
    response = await client.post(SENDGRID, data=body, headers=sendgrid_sign(body))
    assert response.status == 200
