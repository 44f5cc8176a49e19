"""A webhook receiver for the tests: checks every request with the `standardwebhooks` and
`svix` libraries (not tenantd code) and records what it accepted, in arrival order."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from svix.webhooks import Webhook as SvixWebhook
from svix.webhooks import WebhookVerificationError as SvixVerificationError


@dataclass
class Received:
    webhook_id: str
    timestamp: str
    signature: str
    body: dict[str, Any]
    at: float


@dataclass
class Receiver:
    secrets: list[str]
    accepted: list[Received] = field(default_factory=list)
    attempts: list[Received] = field(default_factory=list)
    refused_signatures: int = 0
    # Decides the status of each verified request (default 200).
    answer: Callable[[Received], int] = lambda _received: 200
    url: str = ""
    # When set, every request waits for it before it is answered (deliveries held in flight).
    gate: asyncio.Event | None = None
    # A slow but healthy receiver: every answer comes this many seconds after its request.
    delay: float = 0.0
    arrived: int = 0  # requests read, answered or not (held by the gate)

    def verify(self, raw: bytes, headers: dict[str, str]) -> bool:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(raw, headers)
                SvixWebhook(secret).verify(raw, headers)
                return True
            except (WebhookVerificationError, SvixVerificationError):
                continue
        return False

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.arrived += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self.verify(raw, headers):
            self.refused_signatures += 1
            return web.Response(status=401)
        received = Received(
            headers["webhook-id"],
            headers["webhook-timestamp"],
            headers["webhook-signature"],
            json.loads(raw),
            time.monotonic(),
        )
        self.attempts.append(received)
        status = self.answer(received)
        if 200 <= status < 300:
            self.accepted.append(received)
        if 300 <= status < 400:
            return web.Response(status=status, headers={"Location": self.url + "/elsewhere"})
        return web.Response(status=status)

    def ids(self) -> list[str]:
        return [r.webhook_id for r in self.accepted]

    def of_type(self, type_: str) -> list[Received]:
        return [r for r in self.accepted if r.body["type"] == type_]


async def start_receiver(
    aiohttp_server: Any, secrets: list[str], *, delay: float = 0.0
) -> Receiver:
    receiver = Receiver(secrets, delay=delay)
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    app.router.add_post("/elsewhere", receiver.handle)
    server = await aiohttp_server(app)
    receiver.url = f"http://127.0.0.1:{server.port}"
    return receiver
