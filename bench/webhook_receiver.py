"""A local webhook receiver for the delivery figures: answers 204 to every POST and checks
one request in 100 with the `standardwebhooks` library (the secret comes in argv).

It stands for the subscriber's machine, which on the 2-core bench box shares the cores with
the system under test. So it is as cheap as a fast real receiver can be: a bare asyncio
protocol reading HTTP/1.1 keep-alive requests (Content-Length bodies, pipelining allowed) and
answering each with a fixed 204, no framework. `GET /stats` answers `{"n", "bad"}` (requests
seen, signatures that failed the check). bench/outbox.py runs it at the lowest priority.
"""

from __future__ import annotations

import asyncio
import sys

import orjson
from standardwebhooks.webhooks import Webhook

NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
CHECK_EVERY = 100


class Counters:
    def __init__(self, secret: str) -> None:
        self.verifier = Webhook(secret)
        self.n = 0
        self.bad = 0


def _headers(head: bytes) -> tuple[bytes, dict[str, str]]:
    lines = head.split(b"\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return lines[0], headers


class Receiver(asyncio.Protocol):
    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer = self.buffer + data if self.buffer else data
        answers = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end]
            # The one header needed on the fast path, found without parsing the others.
            lower = head.lower()
            at = lower.find(b"\r\ncontent-length:")
            if at < 0:
                length = 0
            else:
                stop = lower.find(b"\r\n", at + 2)
                length = int(lower[at + 17 : stop if stop >= 0 else len(lower)])
            if len(self.buffer) < end + 4 + length:
                break
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            answers.append(self.answer(head, body))
            if answers[-1] is BAD_REQUEST:
                break
        if answers and self.transport is not None:
            self.transport.write(b"".join(answers))
            if answers[-1] is BAD_REQUEST:
                self.transport.close()

    def answer(self, head: bytes, body: bytes) -> bytes:
        counters = self.counters
        if head.startswith(b"GET /stats"):
            payload = orjson.dumps({"n": counters.n, "bad": counters.bad})
            return (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode()
                + b"\r\n\r\n"
                + payload
            )
        if not head.startswith(b"POST "):
            return BAD_REQUEST
        counters.n += 1
        if counters.n % CHECK_EVERY == 1:
            _, headers = _headers(head)
            try:
                counters.verifier.verify(body, headers)
            except Exception:
                counters.bad += 1
                return UNAUTHORIZED
        return NO_CONTENT


async def serve(port: int, secret: str) -> None:
    counters = Counters(secret)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Receiver(counters), "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, secret = int(sys.argv[1]), sys.argv[2]
    asyncio.run(serve(port, secret))


if __name__ == "__main__":
    main()
