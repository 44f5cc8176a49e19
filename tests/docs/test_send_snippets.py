"""The manual's "Send notifications from any backend" snippets (docs/notifications.md,
marked `send-curl` and `send-node`), run as written against a live server whose event module
is the manual's own `comment.created` example: each is accepted (202, queued) and the server's
job runner then stores the notification with its delivery rows."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tenantd.db import Database
from tests.apikeys.helpers import new_key
from tests.docs.snippets import snippet

PLACEHOLDER = "https://auth.example.com"
RECIPIENT = "0b8f5a52-6a7e-4d7e-9a39-3f1f6f0c2b11"


@pytest.fixture
def events_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The manual's event-definition example as an importable module with its template."""
    name = f"docs_send_events_{uuid.uuid4().hex[:8]}"
    package = tmp_path / "modules" / name
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text(snippet("event-definition").code)
    (package / "templates" / "comment.txt").write_text("{{ text }}\n{{ unsubscribe_url }}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    return name


@pytest.fixture
def env(env: dict[str, str], events_module: str) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = events_module
    env["QUEUES_ENABLED"] = "true"
    env["TENANTD_OUTBOX_POLL_SECONDS"] = "0.02"  # the webhook test event leaves at once
    env["TENANTD_JOB_POLL_SECONDS"] = "0.05"
    return env


async def run(*command: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**os.environ, **env},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def stored(db: Database, user_id: uuid.UUID, count: int) -> list[Any]:
    """Wait until the runner has stored `count` notifications of the user; their deliveries."""
    deadline = time.monotonic() + 30
    while True:
        rows = await db.fetch_all(
            "SELECT n.id, d.channel, d.status FROM notifications n"
            " JOIN notification_deliveries d ON d.notification_id = n.id"
            " WHERE n.user_id = %(u)s ORDER BY n.id, d.channel",
            {"u": user_id},
        )
        if len({row["id"] for row in rows}) >= count or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.05)


async def test_the_curl_and_node_snippets_send_a_notification(
    server: TestServer, db: Database, factory: Any, tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: install Node.js to run the manual's Node snippet")
    base = str(server.make_url("")).rstrip("/")
    user = await factory.user()
    key = await new_key(db, "notifications:send")
    secrets = {"TENANTD_API_KEY": key.token}

    curl = snippet("send-curl").code
    assert PLACEHOLDER in curl and RECIPIENT in curl
    script = curl.replace(PLACEHOLDER, base).replace(RECIPIENT, str(user.id))
    code, out, err = await run("bash", "-c", script, env=secrets, cwd=tmp_path)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["success"] is True and answer["data"]["status"] == "queued", out

    fetch = snippet("send-node").code
    assert PLACEHOLDER in fetch
    program = tmp_path / "send.mjs"
    program.write_text(
        f"const recipientId = {json.dumps(str(user.id))};\n"
        'const comment = { id: "c_124", authorId: "6f1d2c3b", text: "Ship it" };\n'
        + fetch.replace(PLACEHOLDER, base)
        + "\nconsole.log(JSON.stringify(data));\n"
    )
    code, out, err = await run(node, str(program), env=secrets, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["status"] == "queued", out

    rows = await stored(db, user.id, 2)
    assert len({row["id"] for row in rows}) == 2, rows
    channels = {(row["channel"], row["status"]) for row in rows}
    assert ("in_app", "sent") in channels, rows
    assert any(channel == "email" for channel, _ in channels), rows


async def test_the_webhook_receiver_snippet_verifies_a_live_delivery(
    server: TestServer, db: Database, aiohttp_server: Any
) -> None:
    """The receiver of docs/webhooks.md (marked `verify-webhook`) serves a real endpoint: the
    test event tenantd signs and sends is verified and applied once; a forged one is 401."""
    seen: set[str] = set()
    applied: list[tuple[str, Any]] = []
    handler: dict[str, Any] = {}
    arrived = asyncio.Event()

    def apply(kind: str, data: Any) -> None:
        applied.append((kind, data))
        arrived.set()

    async def receive(request: web.Request) -> web.StreamResponse:
        return await handler["hook"](request)

    receiver_app = web.Application()
    receiver_app.router.add_post("/hooks/tenantd", receive)
    receiver = await aiohttp_server(receiver_app)
    base = str(server.make_url("")).rstrip("/")
    key = await new_key(db, "webhooks:manage")
    headers = {"Authorization": f"Bearer {key.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(
            f"{base}/api/v1/webhook-endpoints",
            json={"url": str(receiver.make_url("/hooks/tenantd"))},
        ) as response:
            assert response.status == 201, await response.text()
            created = (await response.json())["data"]

        code = snippet("verify-webhook").code
        assert 'Webhook("whsec_...")' in code
        namespace: dict[str, Any] = {
            "web": web,
            "already_processed": lambda event_id: event_id in seen or seen.add(event_id),
            "apply": apply,
        }
        source = code.replace("whsec_...", created["secret"])
        exec(compile(source, "docs/webhooks.md", "exec"), namespace)
        handler["hook"] = namespace["tenantd_hook"]

        endpoint = created["endpoint"]["id"]
        async with session.post(f"{base}/api/v1/webhook-endpoints/{endpoint}/test") as response:
            assert response.status == 200, await response.text()
        await asyncio.wait_for(arrived.wait(), timeout=30)
        assert [kind for kind, _ in applied] == ["webhook.test"], applied

    async with aiohttp.ClientSession() as plain:
        forged = {
            "webhook-id": "evt_forged",
            "webhook-timestamp": str(int(time.time())),
            "webhook-signature": "v1,AAAA",
        }
        async with plain.post(
            receiver.make_url("/hooks/tenantd"), data=b'{"type":"x"}', headers=forged
        ) as response:
            assert response.status == 401
    assert len(applied) == 1
