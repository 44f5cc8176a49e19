"""Around every request: request id, error envelope, metrics, and one log line.

It runs as the first frame of each route's handler (`envelope_routes`), not as an aiohttp
middleware: with a middleware aiohttp builds a chain per request (a cached partial per route,
its own `_fix_request_current_app` frame, one more coroutine), ~10% of a cheap request
(issue 19). Requests no route matches (404, 405) get the same treatment through the router.

The log line is structured (method, route template, status, duration, request id, user and
account ids) and never carries the raw path, query string, headers, cookies or body, so no
token or password can reach the logs through it. 4xx and 503 are logged at warning, other
5xx at error (with the traceback in the log, never in the body), a client that went away (499)
at debug, the rest at info.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web

from tenantd.errors import AppError, NotFound, PayloadTooLarge
from tenantd.ops.metrics import METRICS
from tenantd.ops.shutdown import DRAIN
from tenantd.principal import PRINCIPAL
from tenantd.web.aiohttp_pins import replace_handler, wrap_resolve
from tenantd.web.cors import apply_cors, cors_headers, preflight
from tenantd.web.json import error_response
from tenantd.web.spec import CURRENT_ROUTE

log = logging.getLogger("tenantd.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

UNMATCHED = "<unmatched>"
CLIENT_CLOSED = 499  # the client went away before the answer (nginx's convention)


class MethodNotAllowed(AppError):
    status = 405
    code = "METHOD_NOT_ALLOWED"
    message = "Method not allowed"


def _from_http_exception(exc: web.HTTPException) -> AppError:
    if exc.status == 404:
        return NotFound()
    if exc.status == 405:
        return MethodNotAllowed()
    if exc.status == 413:
        return PayloadTooLarge()
    error = AppError(exc.reason)
    error.status = exc.status
    error.code = exc.reason.upper().replace(" ", "_")
    return error


# Generated ids: 32 hex chars like uuid4().hex, a random process prefix and a counter (unique
# without a getrandom call and a UUID per request; an id names a request, it guards nothing).
_ID_PREFIX = os.urandom(8).hex()
_ID_COUNTER = itertools.count(int.from_bytes(os.urandom(4), "big"))


def _request_id(request: web.Request) -> str:
    incoming = request.headers.get("X-Request-ID")
    if incoming and len(incoming) <= 64 and incoming.replace("-", "").isalnum():
        return incoming
    return f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFFFFFFFFFF:016x}"


def route_template(request: web.Request) -> str:
    """The route as declared (`/api/v1/accounts/{id}`), never the concrete path: bounded
    label cardinality for metrics, and no path-embedded values in logs."""
    spec = request.get(CURRENT_ROUTE)
    if spec is not None:
        return str(spec.path)
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED


def _allowed_methods(request: web.Request, exc: web.HTTPMethodNotAllowed) -> list[str]:
    """Allow (RFC 9110) for a 405: the methods of the path's own route. aiohttp lists those of
    every route that matches, so `/accounts/switch` (POST) would also offer GET, PATCH and
    DELETE of `/accounts/{id}`; a literal path's own resource wins over a template."""
    for resource in request.app.router.resources():
        if resource.canonical == request.path:
            methods = {route.method for route in resource}
            return sorted(methods - {"*"})
    return sorted(exc.allowed_methods)


# -- an error as a page for a person, JSON for everything else -------------------------------------

ErrorPage = Callable[[web.Request, AppError], Awaitable[web.StreamResponse]]
ERROR_PAGE: web.AppKey[ErrorPage] = web.AppKey("error_page")  # set by the hosted pages
# Paths that answer the JSON envelope whatever the Accept header says: the APIs, the protocol
# endpoints (OpenID, SCIM, SSO), the static files and the probes.
JSON_PREFIXES = (
    "/api/",
    "/auth/",
    "/.well-known/",
    "/scim/",
    "/sso/",
    "/static/",
    "/healthz",
    "/readyz",
    "/metrics",
)


def wants_page(request: web.Request) -> bool:
    """The one rule choosing how an error reads: an HTML page for a browser (its Accept names
    text/html) on a path outside the JSON prefixes, the JSON envelope for anything else."""
    path = request.path
    if any(path.startswith(p) or path == p.rstrip("/") for p in JSON_PREFIXES):
        return False
    accept = request.headers.get(hdrs.ACCEPT, "")
    return "text/html" in accept or "application/xhtml+xml" in accept


async def error_answer(
    request: web.Request, error: AppError, request_id: str
) -> web.StreamResponse:
    """The error as the hosted pages' branded page (when they are on and a person asked), else
    the JSON envelope. A page that fails to render falls back to the envelope."""
    render = request.app.get(ERROR_PAGE)
    if render is not None and wants_page(request):
        try:
            return await render(request, error)
        except Exception:
            log.exception("error page failed", extra={"request_id": request_id})
    return error_response(error, request_id=request_id)


async def handle_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = _request_id(request)
    request[REQUEST_ID] = request_id
    metrics = request.app.get(METRICS)
    started = time.perf_counter()
    error: AppError | None = None
    if metrics is not None:
        metrics.requests_started += 1
    origin = request.headers.get(hdrs.ORIGIN)  # CORS: only a request with an Origin pays more
    cors = None if origin is None else cors_headers(request, origin)
    try:
        answer = None if cors is None else preflight(request, cors)
        response = await handler(request) if answer is None else answer
    except AppError as exc:
        error = exc
        response = await error_answer(request, exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = _from_http_exception(exc)
        response = await error_answer(request, error, request_id)
        if isinstance(exc, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = ", ".join(_allowed_methods(request, exc))
    except asyncio.CancelledError:
        _finish(request, metrics, CLIENT_CLOSED, time.perf_counter() - started, None)
        raise
    except Exception:
        error = AppError()
        log.exception(
            "unhandled error",
            extra={"request_id": request_id, "route": route_template(request)},
        )
        response = await error_answer(request, error, request_id)
    if not response.prepared:
        response.headers.setdefault("X-Request-ID", request_id)
        if cors is not None:
            apply_cors(request, response)
    if DRAIN.active:  # SIGTERM came: this answer (a stream's end too) is the connection's last
        response.force_close()
    _finish(request, metrics, response.status, time.perf_counter() - started, error)
    return response


def _finish(
    request: web.Request, metrics: Any, status: int, elapsed: float, error: AppError | None
) -> None:
    route = route_template(request)
    if metrics is not None:
        metrics.requests_finished += 1
        metrics.observe_request(request.method, route, status, elapsed)
    _log_request(request, route, status, elapsed, error)


request_middleware = web.middleware(handle_request)
"""The same, as an aiohttp middleware (for apps built without `envelope_routes`)."""


def enveloped(handler: Handler) -> Handler:
    """`handler` run inside `handle_request` (idempotent). A partial, not a closure: calling
    it makes `handle_request`'s coroutine directly, one frame fewer per request."""
    if isinstance(handler, functools.partial) and handler.func is handle_request:
        return handler
    return functools.partial(handle_request, handler=handler)


def _envelope_route(route: web.AbstractRoute) -> None:
    replace_handler(route, enveloped(route.handler))


async def _envelope_routes(app: web.Application) -> None:
    """on_startup (the router is frozen by then, so every route is there): put every route's
    handler inside `handle_request`, and the 404/405 answers of unmatched requests too."""
    for route in app.router.routes():
        _envelope_route(route)
    wrap_resolve(app.router, _envelope_route)  # a new route per miss, raising 404/405


def envelope_routes(app: web.Application) -> None:
    """What a middleware of `handle_request` would do, without aiohttp's middleware chain."""
    app.on_startup.append(_envelope_routes)


def _log_request(
    request: web.Request, route: str, status: int, elapsed: float, error: AppError | None
) -> None:
    if status == CLIENT_CLOSED:
        level = logging.DEBUG  # nobody to answer, nothing wrong here: one debug line
    elif status == 503:  # unavailable for now (the database, a cap): expected, no traceback
        level = logging.WARNING
    elif status >= 500:
        level = logging.ERROR
    elif status >= 400:
        level = logging.WARNING
    else:
        level = logging.INFO
    if not log.isEnabledFor(level):
        return  # skip building the fields (a few µs on every cached request)
    principal = request.get(PRINCIPAL)
    fields: dict[str, Any] = {
        "request_id": request[REQUEST_ID],
        "method": request.method,
        "route": route,
        "status": status,
        "duration_ms": round(elapsed * 1000, 2),
        "user_id": str(principal.user_id) if principal else None,
        "account_id": str(principal.account_id) if principal and principal.account_id else None,
    }
    if error is not None:
        fields["error_code"] = error.code
    log.log(
        level,
        "%s %s %s %.1fms",
        request.method,
        route,
        status,
        fields["duration_ms"],
        extra={"http": fields},
    )


REQUEST_ID = web.RequestKey("request_id", str)
