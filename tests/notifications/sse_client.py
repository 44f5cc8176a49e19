"""A small text/event-stream reader for the tests (what a browser's EventSource parses)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestServer
from aiohttp.web_runner import BaseRunner

STREAM = "/api/v1/notifications/stream"
WITHIN = 30.0  # seconds: waits for what must come are generous, the machine may be busy


class SseReader:
    def __init__(self, response: Any):
        self.response = response
        self.comments: list[str] = []

    async def next_event(self, within: float = WITHIN) -> dict[str, str] | None:
        """The next dispatched event's fields, or None when the server ended the stream."""
        fields: dict[str, str] = {}
        deadline = asyncio.get_running_loop().time() + within
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError("no event in time")
            line = await asyncio.wait_for(self.response.content.readline(), left)
            if not line:
                return None
            text = line.decode().rstrip("\r\n")
            if text == "":
                if fields:
                    return fields
                continue
            if text.startswith(":"):
                self.comments.append(text[1:].strip())
                continue
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if name == "data" and "data" in fields:
                fields["data"] += "\n" + value
            else:
                fields[name] = value

    async def keep_alive(self, within: float = WITHIN) -> None:
        """Wait for the next keep-alive comment; an event before it is an error."""
        deadline = asyncio.get_running_loop().time() + within
        seen = len(self.comments)
        while "keep-alive" not in self.comments[seen:]:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError("no keep-alive in time")
            line = await asyncio.wait_for(self.response.content.readline(), left)
            text = line.decode().rstrip("\r\n")
            assert line and (text == "" or text.startswith(":")), f"not idle: {text!r}"
            if text.startswith(":"):
                self.comments.append(text[1:].strip())

    async def ended(self, within: float = WITHIN) -> bool:
        """True once the server closes the stream (events before that are skipped)."""
        while True:
            event = await self.next_event(within)
            if event is None:
                return True


async def open_stream(client: Any, headers: dict[str, str] | None = None) -> SseReader:
    response = await client.get(STREAM, headers=headers or {})
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return SseReader(response)


class ServeLikeTestServer(TestServer):
    """A test server whose handlers survive their client leaving, as under `tenantd serve`
    (web.run_app's default). aiohttp's TestServer cancels them, which would hide what the
    service itself must notice."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        kwargs["handler_cancellation"] = False
        return await super()._make_runner(**kwargs)
