"""One middleware: request id, error envelope, and one log line per request.

4xx are logged at warning, 5xx at error (with the traceback in the log, never in the body).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from tenantd import appkeys
from tenantd.errors import AppError, NotFound, PayloadTooLarge
from tenantd.web.json import error_response

log = logging.getLogger("tenantd.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


def _request_id(request: web.Request) -> str:
    incoming = request.headers.get("X-Request-ID", "")
    if 0 < len(incoming) <= 64 and incoming.replace("-", "").isalnum():
        return incoming
    return uuid.uuid4().hex


@web.middleware
async def request_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = _request_id(request)
    request[appkeys.request_id] = request_id
    started = time.perf_counter()
    error: AppError | None = None
    try:
        response = await handler(request)
    except AppError as exc:
        error = exc
        response = error_response(exc, request_id=request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = _from_http_exception(exc)
        response = error_response(error, request_id=request_id)
    except Exception:
        error = AppError()
        log.exception("unhandled error", extra={"request_id": request_id, "path": request.path})
        response = error_response(error, request_id=request_id)
    if not response.prepared:
        response.headers.setdefault("X-Request-ID", request_id)
    _log_request(request, response.status, time.perf_counter() - started, error)
    return response


def _log_request(request: web.Request, status: int, elapsed: float, error: AppError | None) -> None:
    spec = request.get(appkeys.route_spec)
    principal = request.get(appkeys.principal)
    fields = {
        "request_id": request[appkeys.request_id],
        "method": request.method,
        "route": spec.path if spec is not None else request.path,
        "status": status,
        "duration_ms": round(elapsed * 1000, 2),
        "user_id": str(principal.user_id) if principal else None,
        "account_id": str(principal.account_id) if principal and principal.account_id else None,
    }
    if error is not None:
        fields["error_code"] = error.code
    level = logging.ERROR if status >= 500 else logging.WARNING if status >= 400 else logging.INFO
    log.log(
        level,
        "%s %s %s %.1fms",
        request.method,
        fields["route"],
        status,
        fields["duration_ms"],
        extra={"http": fields},
    )
