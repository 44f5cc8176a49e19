"""The router: each route of the one table becomes a handler. An API route runs the CSRF
check, the guard it is given, the rate limit and body parsing before the view, and envelopes
plain data; a page runs the pages' guard it is given, and its refusals become a page.

The rate limit counts a request before its body is validated: the body is read (bounded)
and decoded (its depth checked first) only so far as to find the `email` a limit counts
per address; a request refused for its body has been counted all the same."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tenantd.errors import AppError, NotFound, ValidationFailed
from tenantd.web.body import check_csrf, check_path, parse_query, read_json_object, validate
from tenantd.web.json import json_response, ok
from tenantd.web.ratelimit import rate_limit_request
from tenantd.web.spec import CURRENT_ROUTE, Access, Routes, RouteSpec

# Decides who may call a route: raises Unauthorized, or sets the request's principal.
Guard = Callable[[web.Request, Access], Awaitable[None]]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class PageDoor:
    """What the hosted pages put before and after a page (given by the composition root)."""

    # Who may see the page: an answer (off to sign in first), or the page's leading
    # arguments (the viewer of a signed-in page).
    guard: Callable[[web.Request, RouteSpec], Awaitable[web.StreamResponse | tuple[Any, ...]]]
    # A page's refusal (not found, not allowed, a refused form) as a page, never JSON.
    refused: Callable[[web.Request, AppError], web.StreamResponse]
    # The posted form of a form page, its origin and form token checked.
    form: Callable[[web.Request], Awaitable[Any]]


# Every route of the application, API and pages: the one table.
ROUTE_SPEC = web.AppKey("route_specs", list)
_PARAM = re.compile(r"{(\w+)}")


def path_params(path: str) -> list[str]:
    return _PARAM.findall(path)


def path_uuid(request: web.Request, name: str) -> uuid.UUID:
    """A UUID path parameter; anything else is simply not found."""
    try:
        return uuid.UUID(request.match_info[name])
    except (KeyError, ValueError):
        raise NotFound() from None


def build_handler(
    spec: RouteSpec, guard: Guard
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    has_params = "{" in spec.path  # a literal path has no parameter to check

    async def handler(request: web.Request) -> web.StreamResponse:
        request[CURRENT_ROUTE] = spec
        check_csrf(request, spec)
        await guard(request, spec.access)
        if has_params:
            check_path(request)
        args: list[Any] = []
        if spec.query is not None:
            args.append(parse_query(request, spec.query))
        data: dict[str, Any] | None = None
        refused: ValidationFailed | None = None
        if spec.body is not None:
            try:
                data = await read_json_object(request, limit=spec.body_limit)
            except ValidationFailed as error:
                refused = error
        if spec.rate_limit is not None:
            email = data.get("email") if data is not None else None
            await rate_limit_request(
                request, spec.rate_limit, None, email=email if isinstance(email, str) else None
            )
        if refused is not None:
            raise refused
        if spec.body is not None:
            args.append(validate(spec.body, data))
        result = await spec.view(request, *args)
        if isinstance(result, web.StreamResponse):
            return result
        if spec.wrapped:
            return ok(result, status=spec.status)
        return json_response(result, status=spec.status)

    handler.__name__ = spec.view.__name__
    return handler


def build_page_handler(spec: RouteSpec, door: PageDoor) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        request[CURRENT_ROUTE] = spec
        try:
            admitted = await door.guard(request, spec)
            if isinstance(admitted, web.StreamResponse):
                return admitted
            if spec.again is None:
                answer: web.StreamResponse = await spec.view(request, *admitted)
                return answer
            return await _form_post(request, spec, door, admitted)
        except AppError as exc:
            return door.refused(request, exc)

    handler.__name__ = spec.view.__name__
    return handler


async def _form_post(
    request: web.Request, spec: RouteSpec, door: PageDoor, admitted: tuple[Any, ...]
) -> web.StreamResponse:
    """Read the form, run the view; a refusal (of the form or of the action) shows the
    form's page again, with what was posted (None when the form itself was refused)."""
    assert spec.again is not None
    form = None
    try:
        form = await door.form(request)
        answer: web.StreamResponse = await spec.view(request, *admitted, form)
    except AppError as exc:
        again: web.StreamResponse = await spec.again(request, *admitted, form, exc)
        return again
    return answer


def register(
    app: web.Application, *tables: Routes, guard: Guard, pages: PageDoor | None = None
) -> None:
    """Add every route of `tables`: API routes behind `guard`, pages behind `pages`."""
    specs = app.get(ROUTE_SPEC)
    if specs is None:
        specs = []
        app[ROUTE_SPEC] = specs
    for table in tables:
        if table.state is not None:
            table.state(app)
        for spec in table.specs:
            if spec.page:
                if pages is None:
                    raise ValueError(f"{spec.name}: a page needs the pages' door")
                handler = build_page_handler(spec, pages)
            else:
                handler = build_handler(spec, guard)
            app.router.add_route(spec.method, spec.path, handler)
            specs.append(spec)


def api_routes(specs: Iterable[RouteSpec]) -> list[RouteSpec]:
    """The routes the OpenAPI document lists."""
    return [spec for spec in specs if spec.include_in_openapi]
