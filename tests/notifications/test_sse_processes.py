"""SSE across two real `tenantd serve` processes on one database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tenantd.app.bundle import open_services
from tenantd.app.settings import load_settings
from tenantd.notifications import send
from tests.notifications.sse_client import SseReader

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(env: dict[str, str]) -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tenantd",
        "serve",
        "--port",
        str(port),
        "--no-migrate",
        cwd=str(ROOT),
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(1200):  # 60 s: a busy machine starts a process slowly
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{base}/healthz") as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("tenantd serve did not come up")
        yield base
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


@pytest.mark.slow
async def test_two_serve_processes_deliver_to_each_others_clients(
    env: dict[str, str], migrated: str, db: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    async with (
        serve(env) as first,
        serve(env) as second,
        aiohttp.ClientSession(cookies=cookies) as browser,
    ):
        readers = []
        for base in (first, second):
            response = await browser.get(f"{base}/api/v1/notifications/stream")
            assert response.status == 200
            readers.append(SseReader(response))
        # Both processes LISTEN before anything is published: a stream subscribes before it
        # answers its headers, and both answered 200.
        # A third process (this test) dispatches; both servers' clients receive it.
        async with open_services(load_settings(environ=env), migrated) as services_bundle:
            services = services_bundle.notifications
            outcome = await send(
                services, "ping.simple", recipient_user_id=user.id, payload={"n": 1}
            )
        for reader in readers:
            event = await reader.next_event()
            assert event is not None
            assert event["id"] == str(outcome.notification_id)
            assert json.loads(event["data"])["notification"]["title"] == "Ping 1"
        for reader in readers:
            reader.response.close()
