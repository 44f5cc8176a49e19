"""Nobody without credentials can starve a provider that has them: raw sockets trickle bodies
that could never verify (a Resend request with a well-formed but wrong signature, an SES
request with only the topic headers) from several addresses, and a Postmark delivery with
valid credentials is still taken at once; each client address holds at most its share of the
shared slots; and a body that comes too slowly is cut."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tenantd.db import Database
from tests.email.support import Start
from tests.helpers import eventually
from tests.suppression.test_postmark_webhook import PASSWORD, USER, bounce
from tests.suppression.test_resend_webhook import SECRET, event, svix_headers
from tests.suppression.test_webhook_intake import RawConnection, gate_of, request_head, suppressed

RESEND = "/api/v1/webhooks/resend"
SES = "/api/v1/webhooks/ses"
POSTMARK = "/api/v1/webhooks/postmark"
TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-feedback"
PROMPTLY = 5.0  # the answer the starved provider got after 10 s (a 503) must come well before


@pytest.fixture
async def client(start: Start) -> TestClient[Any, Any]:
    return await start(
        RESEND_WEBHOOK_SECRET=SECRET,
        SES_SNS_TOPIC_ARNS=TOPIC,
        POSTMARK_WEBHOOK_USERNAME=USER,
        POSTMARK_WEBHOOK_PASSWORD=PASSWORD,
    )


class Trickle:
    """A raw socket from `source` that announces a body and then sends it a byte at a time."""

    def __init__(self, connection: RawConnection, rest: bytes):
        self.connection = connection
        self.rest = rest
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, client: TestClient[Any, Any], source: str, path: str, headers: dict[str, str]
    ) -> Trickle:
        reader, writer = await asyncio.open_connection(
            client.host, client.port, local_addr=(source, 0)
        )
        body = b'{"type": "email.bounced", "data": {"to": ["x@example.com"]}}' * 50
        connection = RawConnection(reader, writer)
        await connection.send(request_head(path, headers, content_length=len(body)) + body[:1])
        trickle = cls(connection, body[1:])
        trickle.task = asyncio.create_task(trickle.drip())
        return trickle

    async def drip(self) -> None:
        try:
            for byte in self.rest:
                await self.connection.send(bytes([byte]))
                await asyncio.sleep(0.2)
        except (ConnectionError, OSError):
            pass  # cut by the server

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.connection.writer.close()


def forged_resend_headers() -> dict[str, str]:
    """Well-formed Standard Webhooks headers whose signature is over another body."""
    return svix_headers(event("email.bounced", "someone@example.com"))


def ses_topic_headers() -> dict[str, str]:
    return {
        "Content-Type": "text/plain; charset=UTF-8",
        "x-amz-sns-message-type": "Notification",
        "x-amz-sns-message-id": "0f4c1d3e-0000-4000-8000-000000000000",
        "x-amz-sns-topic-arn": TOPIC,
    }


def postmark_credentials() -> dict[str, str]:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}", "Content-Type": "application/json"}


async def test_slow_unauthenticated_bodies_do_not_starve_an_authenticated_provider(
    client: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(client)
    assert gate.limit == 8 and gate.per_client == 2
    gate.grace = 120.0  # the tricklers hold their slots for the whole test, however slow it runs
    trickles = []
    try:
        # Eight slow bodies from four addresses (two each, their share): every shared slot.
        for index in range(8):
            source = f"127.0.0.{2 + index // 2}"
            if index % 2:
                trickles.append(await Trickle.open(client, source, SES, ses_topic_headers()))
            else:
                trickles.append(await Trickle.open(client, source, RESEND, forged_resend_headers()))
        await eventually(lambda: gate.held == 8)
        started = time.monotonic()
        response = await client.post(
            POSTMARK, data=bounce("bounced@example.com"), headers=postmark_credentials()
        )
        elapsed = time.monotonic() - started
        assert response.status == 200, await response.text()
        assert elapsed < PROMPTLY
        assert await suppressed(db) == ["bounced@example.com"]
        assert gate.held == 8  # the slow ones are still there: the provider did not wait
    finally:
        for trickle in trickles:
            trickle.close()
    await eventually(lambda: gate.held == 0)


async def test_one_client_holds_at_most_its_share_of_the_shared_slots(
    client: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(client)
    gate.grace = 120.0
    gate.wait = 120.0  # the over-share request waits; the test ends it
    trickles = [
        await Trickle.open(client, "127.0.0.2", RESEND, forged_resend_headers()) for _ in range(3)
    ]
    try:
        await eventually(lambda: gate.held == 2 and gate.waiting == 1)
        assert gate.held_by("127.0.0.2") == 2
        # Another address still gets a slot at once, and its delivery is applied.
        body = event("email.bounced", "other@example.com")
        connection = RawConnection(
            *await asyncio.open_connection(client.host, client.port, local_addr=("127.0.0.3", 0))
        )
        headers = {**svix_headers(body), "Connection": "close"}
        await connection.send(request_head(RESEND, headers, content_length=len(body)) + body)
        answer = await connection.answer_then_close()
        assert answer.status == 200, answer
        assert await suppressed(db) == ["other@example.com"]
        assert gate.held == 2 and gate.waiting == 1
    finally:
        for trickle in trickles:
            trickle.close()
    await eventually(lambda: gate.held == 0 and gate.waiting == 0)


async def test_a_body_that_comes_too_slowly_is_cut_and_frees_its_slot(
    client: TestClient[Any, Any], db: Database
) -> None:
    gate = gate_of(client)
    gate.grace = 0.5  # the production grace is 2 s; the rate is the production one
    trickle = await Trickle.open(client, "127.0.0.2", RESEND, forged_resend_headers())
    try:
        answer = await trickle.connection.answer_then_close()
    finally:
        trickle.close()
    assert answer.status == 408, answer
    assert answer.headers.get("connection", "").lower() == "close"
    assert answer.json["error"]["code"] == "REQUEST_TIMEOUT"
    assert gate.held == 0
    assert await suppressed(db) == []
