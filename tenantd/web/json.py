"""JSON encoding and the response envelopes of the API."""

from __future__ import annotations

import datetime as dt
import re
from itertools import accumulate
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from tenantd.errors import AppError, ValidationFailed
from tenantd.web.aiohttp_pins import JsonResponse

__all__ = ["JsonResponse", "dumps", "error_response", "json_response", "loads_bounded", "ok"]


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        raise TypeError("bytes are not JSON")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any, *, indent: bool = False) -> bytes:
    """The API's JSON; `indent` for people (the CLI's --json), where keys may also be str
    subclasses (enum members)."""
    if indent:
        options = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS | orjson.OPT_INDENT_2
        return orjson.dumps(value, default=_default, option=options)
    return orjson.dumps(value, default=_default, option=orjson.OPT_UTC_Z)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return JsonResponse(dumps(body), status=status, headers=headers)


def ok(data: Any, *, status: int = 200) -> web.Response:
    """Wrapped success envelope: {success: true, data, timestamp}. The timestamp is handed
    to orjson as a datetime (OPT_UTC_Z writes what `now_iso` would, one call fewer)."""
    envelope = {"success": True, "data": data, "timestamp": dt.datetime.now(dt.UTC)}
    return JsonResponse(dumps(envelope), status=status)


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


MAX_JSON_DEPTH = 32  # INTERFACE.md: a body nested deeper is 422 VALIDATION_ERROR

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))


def json_depth_over(raw: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests arrays and objects deeper than `limit`: strings dropped,
    only the brackets kept, and the deepest running count of them taken, all in C loops (no
    recursion, no per-byte Python code), before any parser or validator walks the text (a
    few hundred levels exhaust Python's stack in any recursive walk)."""
    data = raw.encode() if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep at all
    if b"\\" in data or data.count(b'"') % 2:
        outside = _JSON_STRING.sub(b"", data)
    else:
        # No escape and paired quotes: every other piece between quotes is a string. A split
        # is C work; the regex's per-string matches cost more than parsing a big body.
        outside = b"".join(data.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def loads_bounded(raw: bytes | str) -> Any:
    """JSON text as Python values; 422 VALIDATION_ERROR when malformed or nested deeper than
    MAX_JSON_DEPTH (checked first, without recursion)."""
    if json_depth_over(raw):
        raise ValidationFailed({"body": f"nested deeper than {MAX_JSON_DEPTH} levels"})
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ValidationFailed({"body": "malformed JSON"}) from None
