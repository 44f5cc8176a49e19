"""A CLI command that delivers inline still logs the operational events SERVICE.md names,
while the rest of info stays quiet."""

from __future__ import annotations

import base64
import json
import os
import uuid
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.cli.vapid import generate_keys
from tenantd.db import Database
from tenantd.notifications.channels.web_push.delivery import EXPIRED_EVENT
from tests.factories import run_tenantd

EVENT_MODULE = "tests.notifications.events_fixture"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class GonePushService:
    """A push service for which every subscription has expired (RFC 8030: 410 Gone)."""

    def __init__(self) -> None:
        self.received: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.received.append(request.match_info["name"])
        return web.Response(status=410)


@pytest.fixture
async def push_service(aiohttp_server: Any) -> tuple[GonePushService, str]:
    fake = GonePushService()
    app = web.Application()
    app.router.add_post("/push/{name}", fake.handle)
    server = await aiohttp_server(app)
    return fake, f"http://127.0.0.1:{server.port}"


async def test_notify_send_logs_an_expired_push_subscription(
    env: dict[str, str], db: Database, factory: Any, push_service: tuple[GonePushService, str]
) -> None:
    fake, base = push_service
    public, private = generate_keys()
    user = await factory.user()
    browser = ec.generate_private_key(ec.SECP256R1())
    p256dh = browser.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    subscription = await db.fetch_val(
        "INSERT INTO push_subscriptions (user_id, endpoint, p256dh_key, auth_key)"
        " VALUES (%(u)s, %(e)s, %(p)s, %(a)s) RETURNING id",
        {"u": user.id, "e": f"{base}/push/gone", "p": b64url(p256dh), "a": b64url(os.urandom(16))},
    )
    cli_env = {
        **env,
        "LOG_LEVEL": "info",  # the default: the CLI keeps warnings and operational events
        "LOG_FORMAT": "json",
        "TENANTD_EVENT_MODULES": EVENT_MODULE,
        "QUEUES_ENABLED": "false",  # the command runs the delivery itself
        "WEB_PUSH_VAPID_PUBLIC_KEY": public,
        "WEB_PUSH_VAPID_PRIVATE_KEY": private,
        "WEB_PUSH_VAPID_SUBJECT": "mailto:ops@example.com",
        "WEB_PUSH_ALLOWED_HOSTS": base,
    }
    payload = json.dumps({"actorId": str(uuid.uuid4()), "commentId": "c1", "text": "hi"})
    code, out, err = await run_tenantd(
        cli_env, "notify", "send", "comment.created", "--user", str(user.id), "--payload", payload
    )
    assert code == 0, err
    assert json.loads(out)["status"] == "created"
    assert fake.received == ["gone"]
    assert await db.fetch_val("SELECT count(*) FROM push_subscriptions") == 0

    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    expired = [r for r in records if r["message"] == EXPIRED_EVENT]
    assert len(expired) == 1, err
    assert expired[0]["level"] == "info"
    assert expired[0]["event"] == EXPIRED_EVENT
    assert expired[0]["subscription_id"] == str(subscription)
    assert expired[0]["user_id"] == str(user.id)
    # Nothing else below warning: the CLI stays quiet about the rest of its work.
    assert all(r["level"] in ("warning", "error") for r in records if r is not expired[0]), err
