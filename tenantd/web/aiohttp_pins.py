"""The one module that touches aiohttp's private names, for two measured shortcuts on every
request that aiohttp offers no public spelling for (issue 19). Everything else in tenantd uses
aiohttp's public API only.

Why each one is worth the pin:

- `JsonResponse` writes what `web.Response(body=..., content_type="application/json")` writes,
  with less of aiohttp's generic work per answer: the headers are a copy of a prebuilt mapping,
  and in the common case (HTTP/1.1 keep-alive, a body, no cookie or compression asked for) it
  fills Content-Length, Date and Server itself instead of running `_prepare_headers`' general
  decisions. Anything else goes through aiohttp's own path.
- `replace_handler` and `wrap_resolve` let the request envelope (`web/middlewares.py`) run as
  the first frame of each route's handler instead of as an aiohttp middleware, for which
  aiohttp builds a chain per request (a cached partial per route, its own
  `_fix_request_current_app` frame, one more coroutine): ~10% of a cheap request. aiohttp has
  no public way to replace a registered route's handler, nor a hook for the routes it makes
  up for unmatched requests (404/405), hence the two.

The pin: SUPPORTED is the aiohttp range these names were read in; pyproject.toml bounds aiohttp
to it and requirements.lock holds one version inside it. PRIVATE_NAMES lists every private
name used here, and tests/web/test_aiohttp_pins.py fails when one of them is gone or when
`web.Response` starts setting state this class does not; tests/perf/test_json_response.py
compares the bytes on the wire with `web.Response`'s. Raising the bound means running both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.compression_utils import MAX_SYNC_CHUNK_SIZE
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from aiohttp.web_response import REASON_PHRASES
from aiohttp.web_urldispatcher import MatchInfoError
from multidict import CIMultiDict

SUPPORTED = ">=3.14,<3.15"

# (owner, name) for every private or module-internal name this module reads or writes.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("aiohttp.web.StreamResponse", "_state"),
    ("aiohttp.web.StreamResponse", "_headers"),
    ("aiohttp.web.StreamResponse", "_status"),
    ("aiohttp.web.StreamResponse", "_reason"),
    ("aiohttp.web.StreamResponse", "_must_be_empty_body"),
    ("aiohttp.web.StreamResponse", "_chunked"),
    ("aiohttp.web.StreamResponse", "_compression"),
    ("aiohttp.web.StreamResponse", "_cookies"),
    ("aiohttp.web.StreamResponse", "_keep_alive"),
    ("aiohttp.web.StreamResponse", "_req"),
    ("aiohttp.web.StreamResponse", "_payload_writer"),
    ("aiohttp.web.StreamResponse", "_start"),
    ("aiohttp.web.StreamResponse", "_write_headers"),
    ("aiohttp.web.Response", "_body"),
    ("aiohttp.web.Response", "_zlib_executor_size"),
    ("aiohttp.web.Response", "_zlib_executor"),
    ("aiohttp.web.BaseRequest", "_payload_writer"),
    ("aiohttp.web.BaseRequest", "_prepare_hook"),
    ("aiohttp.web.ResourceRoute", "_handler"),
    ("aiohttp.web.UrlDispatcher", "resolve"),
    ("aiohttp.compression_utils", "MAX_SYNC_CHUNK_SIZE"),
    ("aiohttp.helpers", "rfc822_formatted_time"),
    ("aiohttp.http", "SERVER_SOFTWARE"),
    ("aiohttp.web_response", "REASON_PHRASES"),
    ("aiohttp.web_urldispatcher", "MatchInfoError"),
)

__all__ = ["SUPPORTED", "JsonResponse", "MatchInfoError", "replace_handler", "wrap_resolve"]

_JSON_HEADERS: CIMultiDict[str] = CIMultiDict({hdrs.CONTENT_TYPE: "application/json"})


class JsonResponse(web.Response):
    """`web.Response(body=body, status=status, content_type="application/json")` for a body
    that is bytes already (see the module docstring)."""

    def __init__(
        self, body: bytes, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        # What Response.__init__ and StreamResponse.__init__ set for these arguments.
        self._state = {}
        if headers:
            self._headers = CIMultiDict(headers)
            self._headers[hdrs.CONTENT_TYPE] = "application/json"
        else:
            self._headers = _JSON_HEADERS.copy()
        self._status = status
        self._reason = REASON_PHRASES.get(status, "")
        self._body = body
        self._zlib_executor_size = MAX_SYNC_CHUNK_SIZE
        self._zlib_executor = None

    async def _start(self, request: web.BaseRequest) -> AbstractStreamWriter:
        headers = self._headers
        body = self._body
        if (
            not isinstance(body, bytes | bytearray)
            or not body
            or self._must_be_empty_body
            or self._chunked
            or self._compression
            or self._cookies
            or self._keep_alive is not None
            or request.version != HttpVersion11
            or not request.keep_alive
            or hdrs.CONTENT_LENGTH in headers
            or hdrs.DATE in headers
            or hdrs.CONNECTION in headers
        ):
            return await super()._start(request)
        # StreamResponse._prepare_headers for this case: length known, keep-alive on 1.1
        # (no Connection header), a body with its Content-Type.
        self._req = request
        writer = self._payload_writer = request._payload_writer
        self._keep_alive = True
        length = len(body)
        headers[hdrs.CONTENT_LENGTH] = str(length)
        writer.length = length
        headers[hdrs.DATE] = rfc822_formatted_time()
        headers.setdefault(hdrs.SERVER, SERVER_SOFTWARE)
        await request._prepare_hook(self)
        await self._write_headers()
        return writer


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def replace_handler(route: web.AbstractRoute, handler: Handler) -> None:
    """Make `handler` the registered route's handler (after the router is frozen)."""
    route._handler = handler  # type: ignore[assignment]


def wrap_resolve(router: web.UrlDispatcher, on_miss: Callable[[web.AbstractRoute], None]) -> None:
    """Call `on_miss` with the route aiohttp makes up for each unmatched request (it raises
    404 or 405 when called), before that route runs."""
    resolve = router.resolve

    async def resolve_and_see(request: web.Request) -> web.UrlMappingMatchInfo:
        match_info = await resolve(request)
        if isinstance(match_info, MatchInfoError):  # a new route per miss
            on_miss(match_info.route)
        return match_info

    router.resolve = resolve_and_see  # type: ignore[method-assign]
