"""Requests the HTTP parser rejects are the client's fault: one warning line each (no
traceback, no error, never the offending bytes), rate-limited so a flood cannot fill the log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.test_utils import TestServer

from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.settings import Settings
from tenantd.web.parser_log import PARSER_WARNINGS_PER_WINDOW, ServerLog
from tests.helpers import eventually

SECRET_VALUE = "sekrit-token-0123456789"
MALFORMED = [
    # A NUL in a header value (the review's probe), carrying a credential.
    f"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SECRET_VALUE}\x00\r\n\r\n",
    # A NUL in a header name.
    f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-{SECRET_VALUE}\x00: 1\r\n\r\n",
    # A header line over the parser's limit.
    f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: {SECRET_VALUE}{'a' * 9000}\r\n\r\n",
]


@pytest.fixture
async def real_server(db: Database, settings: Settings, migrated: str) -> Any:
    server = TestServer(create_app(settings, migrated))
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def send_raw(port: int | None, request: str) -> bytes:
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request.encode("latin-1"))
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def rejections(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "malformed request" in r.getMessage()]


async def test_a_malformed_request_is_one_warning_line(
    real_server: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for request in MALFORMED:
        answer = await send_raw(real_server.port, request)
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r for r in caplog.records if r.exc_info or r.exc_text] == []
    lines = rejections(caplog)
    assert len(lines) == len(MALFORMED)
    for record in lines:
        assert record.levelno == logging.WARNING
        assert "\n" not in record.getMessage()
    text = caplog.text
    assert SECRET_VALUE not in text and "Traceback" not in text
    messages = [r.getMessage() for r in lines]
    assert "Invalid header value char" in messages[0]
    assert "Got more than 8190 bytes when reading" in messages[2]
    # A well-formed request on the same server is answered and logged as usual.
    assert (await real_server_get(real_server, "/healthz")).startswith(b"HTTP/1.1 200")


async def real_server_get(server: TestServer, path: str) -> bytes:
    return await send_raw(
        server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )


async def test_a_flood_of_malformed_requests_is_rate_limited(
    real_server: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers = await asyncio.gather(
        *(send_raw(real_server.port, MALFORMED[0]) for _ in range(PARSER_WARNINGS_PER_WINDOW * 5))
    )
    assert all(b" 400 " in answer.split(b"\r\n")[0] for answer in answers)
    assert len(rejections(caplog)) == PARSER_WARNINGS_PER_WINDOW
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_the_window_ends_with_a_count_of_what_was_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server_log = ServerLog(limit=2, window=0.5)
    error = BadHttpMessage("Invalid header value char:\n\n  b'X: \\x00'")
    for _ in range(7):
        server_log.exception("Error handling request from %s", "203.0.113.9", exc_info=error)
    assert len(rejections(caplog)) == 2

    def summary() -> list[str]:
        return [m for m in (r.getMessage() for r in caplog.records) if "5 more malformed" in m]

    await eventually(lambda: asyncio.sleep(0, summary()))
    assert len(summary()) == 1
    # A new window logs again.
    server_log.exception("Error handling request from %s", "203.0.113.9", exc_info=error)
    assert len(rejections(caplog)) == 4  # 2 lines, the summary, and this one
    # Anything that is not a parser rejection still reaches aiohttp's logger as before.
    with caplog.at_level(logging.ERROR, logger="aiohttp.server"):
        server_log.exception("Unhandled exception", exc_info=RuntimeError("ours"))
    assert any(r.name == "aiohttp.server" and r.exc_info for r in caplog.records)
