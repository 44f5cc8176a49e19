"""Request parsing: size limits, JSON content type, pydantic validation, CSRF origin check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from tenantd.errors import (
    AppError,
    Forbidden,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
)
from tenantd.settings import SETTINGS, Settings
from tenantd.web.json import loads_bounded
from tenantd.web.middlewares import CLIENT_CLOSED
from tenantd.web.schemas import control_character_fields
from tenantd.web.spec import Access, RouteSpec

Model = TypeVar("Model", bound=BaseModel)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SESSION_COOKIES = ("auth_token", "refresh_token")


class ClientClosed(AppError):
    """The client closed the connection before its body arrived: nobody is left to answer,
    and it is not the server's fault (never a 5xx, never a traceback)."""

    status = CLIENT_CLOSED
    code = "CLIENT_CLOSED"
    message = "The client closed the connection before sending the whole body"


def field_errors(error: ValidationError) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "body"
        fields.setdefault(location, item["msg"])
    return fields


async def read_limited(
    request: web.Request, limit: int, *, deadline: Callable[[int], float] | None = None
) -> bytes:
    """Read the raw body once, refusing more than `limit` bytes (413). `deadline(size)`: the
    event-loop time by which more than `size` bytes must have come (TimeoutError after it)."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge()
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            if deadline is None:
                chunk = await request.content.read(65536)
            else:
                async with asyncio.timeout_at(deadline(size)):
                    chunk = await request.content.read(65536)
        except (ConnectionError, HttpProcessingError) as error:
            # Reset, or the stream ended short of its Content-Length or chunked framing: the
            # request's own log line (499, at debug) is all that is said about it.
            raise ClientClosed() from error
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def validate(model: type[Model], data: Any) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ValidationFailed(field_errors(error)) from None


async def read_json_object(request: web.Request, *, limit: int) -> dict[str, Any]:
    """The body as a JSON object, not validated yet: 415 unless JSON, 413 over `limit`, 422
    when malformed, not an object, or nested deeper than MAX_JSON_DEPTH (found without
    recursion, before anything walks it)."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType()
    raw = await read_limited(request, limit)
    data = loads_bounded(raw) if raw else None
    if not isinstance(data, dict):
        raise ValidationFailed({"body": "expected a JSON object"})
    return data


QUERY_MEMO_SIZE = 256
_QUERY_MEMO: dict[tuple[type[BaseModel], str], BaseModel] = {}


def parse_query(request: web.Request, model: type[Model]) -> Model:
    """The query string validated by `model`. A frozen model's answers are kept per raw
    query string (the same string always parses the same way; refusals are never kept): a
    hot list route asks with the same few strings, and parsing them was ~9% of it."""
    memo = model.model_config.get("frozen", False)
    if memo:
        key = (model, request.raw_path.partition("?")[2])
        found = _QUERY_MEMO.get(key)
        if isinstance(found, model):  # always, when found: the key holds the model
            return found
    refused = control_character_fields(request.query.items())
    if refused:
        raise ValidationFailed(refused)
    parsed = validate(model, dict(request.query))
    if memo:
        if len(_QUERY_MEMO) >= QUERY_MEMO_SIZE:
            _QUERY_MEMO.clear()
        _QUERY_MEMO[key] = parsed
    return parsed


def check_path(request: web.Request) -> None:
    """Path parameters are single-line text: a control character in one is 422, not a lookup."""
    refused = control_character_fields(request.match_info.items())
    if refused:
        raise ValidationFailed(refused)


def _origin_of(value: str) -> str | None:
    try:
        parts = urlsplit(value)
    except ValueError:
        return None  # unparseable (`http://[::1`): no origin, so not an allowed one
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def check_csrf(request: web.Request, spec: RouteSpec) -> None:
    """Cookie-authenticated mutations must come from an allowed origin.

    Requests without our cookies carry no ambient authority, and webhooks are signed,
    so only browser requests holding a session cookie are checked.
    """
    if request.method not in MUTATING or spec.access is Access.SIGNATURE:
        return
    if not any(name in request.cookies for name in SESSION_COOKIES):
        return
    if not origin_allowed(request, request.app[SETTINGS]):
        raise Forbidden("Cross-site request refused: Origin is not allowed")


def origin_allowed(request: web.Request, settings: Settings) -> bool:
    """The request's Origin (or, without one, its Referer) is one of ALLOWED_ORIGINS."""
    allowed = {o.lower().rstrip("/") for o in settings.web.allowed_origins}
    origin = request.headers.get("Origin")
    candidate = _origin_of(origin) if origin and origin != "null" else None
    if candidate is None and not origin:
        referer = request.headers.get("Referer")
        candidate = _origin_of(referer) if referer else None
    return candidate is not None and candidate in allowed
