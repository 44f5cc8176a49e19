"""SIGTERM drains keep-alive connections (issue 26, item 7): clients sending requests back to
back on open keep-alive connections while a real `tenantd serve` receives SIGTERM get a
complete answer to every request they wrote (the last one saying `Connection: close`), or
find their connection closed cleanly before writing one; none is reset or left unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tenantd.app.settings import load_settings
from tenantd.db import Database
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.notifications.sse_client import STREAM
from tests.ops.servers import REPO, running, server_env, start_server

pytestmark = pytest.mark.slow

CLIENTS = 20
DRAIN = 30  # TENANTD_SHUTDOWN_DRAIN_SECONDS: an upper bound the drain must not need
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: tenantd\r\n\r\n"


@dataclass
class Client:
    sent: int = 0
    answered: int = 0
    unanswered: int = 0  # written, then the connection broke before a full answer
    told_to_close: int = 0  # answers with Connection: close
    closed_before_writing: int = 0
    refused: int = 0  # a new connection after the listener went


async def _answer(reader: asyncio.StreamReader) -> dict[str, str]:
    """Read one complete response (status line, headers, Content-Length body)."""
    status = await reader.readuntil(b"\r\n")
    assert status.startswith(b"HTTP/1.1 "), status
    headers: dict[str, str] = {}
    while True:
        line = await reader.readuntil(b"\r\n")
        if line == b"\r\n":
            break
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers["content-length"]))
    return headers


async def _keep_sending(port: int, client: Client) -> None:
    """Requests back to back on one keep-alive connection; a new connection when the server
    closes one (the listener may be gone by then: refused)."""
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client.refused += 1
            return
        try:
            while True:
                if reader.at_eof():
                    client.closed_before_writing += 1
                    break
                writer.write(REQUEST)
                client.sent += 1
                try:
                    await writer.drain()
                    headers = await _answer(reader)
                except (OSError, asyncio.IncompleteReadError):
                    client.unanswered += 1
                    return
                client.answered += 1
                if headers.get("connection", "").lower() == "close":
                    client.told_to_close += 1
                    break
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def test_sigterm_answers_every_request_on_open_keep_alive_connections(
    db: Database, migrated: str, tmp_path: Path
) -> None:
    env = server_env(
        migrated,
        tmp_path,
        SECRET,
        TENANTD_SCHEDULER_ENABLED="false",
        NOTIFICATIONS_SSE_ENABLED="true",
        TENANTD_SHUTDOWN_DRAIN_SECONDS=str(DRAIN),
        PYTHONPATH=str(REPO),
    )
    factory = Factory(db, load_settings(environ=env))
    cookies = await factory.cookies(await factory.user())
    server = start_server("drain", env, tmp_path)
    clients = [Client() for _ in range(CLIENTS)]
    async with running([server]), aiohttp.ClientSession(cookies=cookies) as browser:
        # A live stream open at SIGTERM too: it ends, and holds no connection open.
        stream = await browser.get(server.url + STREAM)
        assert stream.status == 200
        tasks = [asyncio.create_task(_keep_sending(server.port, c)) for c in clients]
        try:
            # Every client busy on its connection, then SIGTERM lands among their requests.
            await eventually(lambda: all(c.answered >= 20 for c in clients), within=60)
            server.terminate(signal.SIGTERM)
            stopped = time.monotonic()
            async with asyncio.timeout(30):
                await asyncio.gather(*tasks)
                await stream.content.read()
        finally:
            for task in tasks:
                task.cancel()
        exit_code = await asyncio.to_thread(server.wait, 30)
        took = time.monotonic() - stopped
    assert exit_code == 0, server.log()[-4000:]
    # The drain ended when the last connection did, not at its bound (nor when the client
    # would have dropped its idle connection, aiohttp's 15 s).
    assert took < 10, took
    for client in clients:
        assert client.unanswered == 0, (clients, server.log()[-4000:])
        assert client.answered == client.sent, clients
        # Each connection ended by the server's own word, or cleanly while idle.
        assert client.told_to_close + client.closed_before_writing >= 1, clients
    assert sum(c.told_to_close for c in clients) > 0, clients
