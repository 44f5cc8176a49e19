"""JSON encoding and the response envelopes of the API."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from tenantd.errors import AppError


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        raise TypeError("bytes are not JSON")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=orjson.OPT_UTC_Z)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=dumps(body), status=status, content_type="application/json", headers=headers
    )


def ok(data: Any, *, status: int = 200) -> web.Response:
    """Wrapped success envelope: {success: true, data, timestamp}."""
    return json_response({"success": True, "data": data, "timestamp": now_iso()}, status=status)


def error_body(error: AppError) -> dict[str, Any]:
    payload: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.details is not None:
        payload["details"] = error.details
    return {"success": False, "error": payload}


def error_response(error: AppError, *, request_id: str | None = None) -> web.Response:
    headers = {"X-Request-ID": request_id} if request_id else {}
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return json_response(error_body(error), status=error.status, headers=headers)
