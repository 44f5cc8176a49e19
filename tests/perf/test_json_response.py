"""`JsonResponse` (issue 19) writes the bytes `web.Response(body=..., content_type=
"application/json")` writes: its shortcut leans on aiohttp internals, so any change of the
pinned aiohttp that alters the answer fails here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tenantd.web.json import JsonResponse

BODY = b'{"user":null,"note":"caf\\u00e9"}'

Variant = Callable[[web.Request], web.StreamResponse]


def plain(status: int, headers: dict[str, str] | None) -> Variant:
    return lambda _: web.Response(
        body=BODY, status=status, content_type="application/json", headers=headers
    )


def fast(status: int, headers: dict[str, str] | None) -> Variant:
    return lambda _: JsonResponse(BODY, status=status, headers=headers)


def with_cookie(make: Variant) -> Variant:
    def build(request: web.Request) -> web.StreamResponse:
        response = make(request)
        response.set_cookie("c", "v", httponly=True)
        return response

    return build


def compressed(make: Variant) -> Variant:
    def build(request: web.Request) -> web.StreamResponse:
        response = make(request)
        response.enable_compression()
        return response

    return build


def closing(make: Variant) -> Variant:
    def build(request: web.Request) -> web.StreamResponse:
        response = make(request)
        response.force_close()
        return response

    return build


def payload_body(make: Variant) -> Variant:
    def build(request: web.Request) -> web.StreamResponse:
        response = make(request)
        assert isinstance(response, web.Response)
        response.body = BODY.decode()  # a StringPayload: aiohttp's general path
        return response

    return build


CASES: dict[str, tuple[Variant, Variant]] = {
    "200": (plain(200, None), fast(200, None)),
    "401 with a header": (plain(401, {"X-Request-ID": "abc"}), fast(401, {"X-Request-ID": "abc"})),
    "201": (plain(201, None), fast(201, None)),
    "cookie": (with_cookie(plain(200, None)), with_cookie(fast(200, None))),
    "compressed": (compressed(plain(200, None)), compressed(fast(200, None))),
    "force_close": (closing(plain(200, None)), closing(fast(200, None))),
    "payload body": (payload_body(plain(200, None)), payload_body(fast(200, None))),
}


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()

    def handler(make: Variant) -> Callable[[web.Request], object]:
        async def handle(request: web.Request) -> web.StreamResponse:
            response = make(request)
            response.headers.setdefault("X-Request-ID", "rid")  # as handle_request does
            return response

        return handle

    for index, (slow_variant, fast_variant) in enumerate(CASES.values()):
        app.router.add_route("*", f"/plain/{index}", handler(slow_variant))
        app.router.add_route("*", f"/fast/{index}", handler(fast_variant))
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


async def raw(server: TestServer, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(request)
    await writer.drain()
    try:
        data = await asyncio.wait_for(read_answer(reader, request.startswith(b"HEAD")), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    return b"\r\n".join(
        line for line in data.split(b"\r\n") if not line.lower().startswith(b"date:")
    )


async def read_answer(reader: asyncio.StreamReader, head_only: bool) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    if head_only:
        return head
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


REQUESTS = {
    "GET 1.1": b"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET 1.1 close": b"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "GET 1.0": b"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n",
    "GET 1.0 keep-alive": b"GET {path} HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
    "HEAD": b"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n",
    "gzip": b"GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
}


@pytest.mark.parametrize("request_name", REQUESTS)
async def test_the_bytes_on_the_wire_are_web_responses(
    server: TestServer, request_name: str
) -> None:
    template = REQUESTS[request_name]
    for index, case in enumerate(CASES):
        slow_answer = await raw(server, template.replace(b"{path}", b"/plain/%d" % index))
        fast_answer = await raw(server, template.replace(b"{path}", b"/fast/%d" % index))
        assert fast_answer == slow_answer, (request_name, case)
        assert fast_answer.startswith(b"HTTP/1.")


async def test_the_common_case_takes_the_shortcut(
    server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    general = web.StreamResponse._prepare_headers
    calls: list[str] = []

    async def counted(self: web.StreamResponse) -> None:
        calls.append(type(self).__name__)
        await general(self)

    monkeypatch.setattr(web.StreamResponse, "_prepare_headers", counted)
    answer = await raw(server, REQUESTS["GET 1.1"].replace(b"{path}", b"/fast/0"))
    assert calls == []
    await raw(server, REQUESTS["GET 1.0"].replace(b"{path}", b"/fast/0"))
    assert calls == ["JsonResponse"]  # the general path for anything else
    assert answer.endswith(BODY)
    head = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK"
    assert sorted(line.split(b":")[0].lower() for line in head[1:]) == [
        b"content-length",
        b"content-type",
        b"server",
        b"x-request-id",
    ]


def test_the_response_reads_like_web_response() -> None:
    response = JsonResponse(BODY, status=404, headers={"Retry-After": "3"})
    reference = web.Response(
        body=BODY, status=404, content_type="application/json", headers={"Retry-After": "3"}
    )
    assert response.status == reference.status == 404
    assert response.reason == reference.reason
    assert response.body == reference.body
    assert response.content_type == reference.content_type == "application/json"
    assert response.charset == reference.charset
    assert dict(response.headers) == dict(reference.headers)
    assert response.content_length == reference.content_length
    assert not response.prepared
