"""Credentialed CORS for the browser-facing routes, decided in one place.

`ALLOWED_ORIGINS` (the CSRF check's list) also names the origins whose pages may call tenantd
from the browser with cookies: `/api/v1/*`, `/auth/*`, `/static/*` and
`/.well-known/jwks.json`. A listed origin gets `Access-Control-Allow-Origin: <origin>`,
`Access-Control-Allow-Credentials: true` and `Vary: Origin` on every answer (errors too, so a
page can read a 401's reason), and its preflight (`OPTIONS` with
`Access-Control-Request-Method`) answers 204 with the route's methods. Any other origin gets
no `Access-Control-*` header at all (only `Vary: Origin`), so the browser keeps the answer from
the page, and its preflight gets the route's ordinary 405.

`handle_request` asks `cors_headers` only when the request carries an `Origin` header, so a
same-origin GET without one (the hot path of `/api/v1/users/me`) pays one header lookup.
"""

from __future__ import annotations

import functools

from aiohttp import hdrs, web

from tenantd.settings import SETTINGS
from tenantd.web.aiohttp_pins import MatchInfoError

CORS_PREFIXES = ("/api/v1/", "/auth/", "/static/")
CORS_PATHS = frozenset({"/.well-known/jwks.json"})
# What a page may send: the JSON body, the send's idempotency key, EventSource's resume
# point, a bearer token (the Node half, or a page that keeps its own) and a request id.
ALLOW_HEADERS = "Accept, Authorization, Content-Type, Idempotency-Key, Last-Event-ID, X-Request-ID"
# What a page may read besides the CORS-safelisted ones.
EXPOSE_HEADERS = "Content-Disposition, Idempotent-Replayed, Location, Retry-After, X-Request-ID"
MAX_AGE = "600"  # seconds a browser may reuse a preflight (Chromium caps it at 7200)

CORS = web.RequestKey("cors_headers", dict)
UNLISTED: dict[str, str] = {}  # an Origin not listed: only `Vary: Origin` (never mutated)


@functools.cache
def _listed(configured: tuple[str, ...]) -> frozenset[str]:
    return frozenset(configured)  # Settings wrote them as browsers write an Origin


def cors_headers(request: web.Request, origin: str) -> dict[str, str] | None:
    """The CORS headers of an answer to `origin` (UNLISTED, empty, when it is not listed), or
    None on a path without CORS."""
    path = request.path
    if not (path.startswith(CORS_PREFIXES) or path in CORS_PATHS):
        return None
    if origin not in _listed(request.app[SETTINGS].web.allowed_origins):
        request[CORS] = UNLISTED  # the answer still varies by Origin (caches)
        return UNLISTED
    headers: dict[str, str] = {
        hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin,
        hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS: "true",
        hdrs.ACCESS_CONTROL_EXPOSE_HEADERS: EXPOSE_HEADERS,
    }
    request[CORS] = headers
    return headers


def preflight(request: web.Request, headers: dict[str, str]) -> web.Response | None:
    """The 204 answer to a listed origin's preflight of an existing route, else None (the
    request then takes its ordinary course: an OPTIONS nobody routes is a 405)."""
    if not headers or request.method != hdrs.METH_OPTIONS:
        return None
    if hdrs.ACCESS_CONTROL_REQUEST_METHOD not in request.headers:
        return None
    match_info = request.match_info
    if not isinstance(match_info, MatchInfoError):
        return None  # a route that answers OPTIONS itself
    error = match_info.http_exception
    if not isinstance(error, web.HTTPMethodNotAllowed):
        return None  # no such path: its 404
    methods = sorted(set(error.allowed_methods) - {"*"})
    answer = web.Response(status=204)  # the envelope adds `headers` (apply_cors)
    answer.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = ", ".join(methods)
    answer.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = ALLOW_HEADERS
    answer.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = MAX_AGE
    return answer


def apply_cors(request: web.Request, response: web.StreamResponse) -> None:
    """Put the request's CORS headers (if any) on `response` before it is prepared: the
    envelope does this for every answer; a view that streams calls it before `prepare`."""
    headers = request.get(CORS)
    if headers is None:
        return
    if headers:
        response.headers.update(headers)
    vary = response.headers.get(hdrs.VARY)
    if vary is None:
        response.headers[hdrs.VARY] = "Origin"
    elif "origin" not in vary.lower():
        response.headers[hdrs.VARY] = vary + ", Origin"
