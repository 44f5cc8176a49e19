"""Declarative route table. Every route says who may call it; requireAuth is the default.

A view is `async def view(request[, body]) -> data | web.StreamResponse`. The wrapper runs
the guard, the CSRF check and body parsing before the view, and envelopes plain data.
"""

from __future__ import annotations

import enum
import inspect
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from tenantd import appkeys
from tenantd.errors import NotFound
from tenantd.web.json import ok

View = Callable[..., Awaitable[Any]]

API_BODY_LIMIT = 1024 * 1024  # 1 MiB for API routes (INTERFACE.md)
WEBHOOK_BODY_LIMIT = 10 * 1024 * 1024  # 10 MiB for webhook routes


class Access(enum.Enum):
    AUTH = "requireAuth"  # default: a valid session cookie is required
    TRY = "tryAuth"  # anonymous is a legitimate state (only /me, /refresh, /mfa/status)
    PUBLIC = "public"  # no session needed (sign-up, sign-in, health)
    SIGNATURE = "signature"  # authenticated by a request signature (webhooks)


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str
    view: View
    access: Access
    body: type[BaseModel] | None
    response: Any
    status: int
    summary: str
    tag: str
    wrapped: bool
    body_limit: int
    query: type[BaseModel] | None = None
    responses: dict[int, str] = field(default_factory=dict)
    content_type: str = "application/json"
    # Abuse-limit scope (e.g. "login"): limited per client IP and per body `email`.
    rate_limit: str | None = None
    # Media type of the success answer (the OpenAPI document says so); JSON unless stated.
    produces: str = "application/json"

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


class Routes:
    """A domain's routes; `create_app` registers every domain's table."""

    def __init__(self, tag: str):
        self.tag = tag
        self.specs: list[RouteSpec] = []

    def route(
        self,
        method: str,
        path: str,
        *,
        access: Access = Access.AUTH,
        body: type[BaseModel] | None = None,
        query: type[BaseModel] | None = None,
        response: Any = None,
        status: int = 200,
        summary: str = "",
        wrapped: bool = True,
        body_limit: int | None = None,
        responses: dict[int, str] | None = None,
        content_type: str = "application/json",
        rate_limit: str | None = None,
        produces: str = "application/json",
    ) -> Callable[[View], View]:
        def decorate(view: View) -> View:
            limit = body_limit or (
                WEBHOOK_BODY_LIMIT if access is Access.SIGNATURE else API_BODY_LIMIT
            )
            self.specs.append(
                RouteSpec(
                    method=method,
                    path=path,
                    view=view,
                    access=access,
                    body=body,
                    query=query,
                    response=response,
                    status=status,
                    summary=summary or (inspect.getdoc(view) or "").split("\n")[0],
                    tag=self.tag,
                    wrapped=wrapped,
                    body_limit=limit,
                    responses=responses or {},
                    content_type=content_type,
                    rate_limit=rate_limit,
                    produces=produces,
                )
            )
            return view

        return decorate

    def get(self, path: str, **kw: Any) -> Callable[[View], View]:
        return self.route("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Callable[[View], View]:
        return self.route("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> Callable[[View], View]:
        return self.route("PUT", path, **kw)

    def patch(self, path: str, **kw: Any) -> Callable[[View], View]:
        return self.route("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any) -> Callable[[View], View]:
        return self.route("DELETE", path, **kw)


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


def build_handler(spec: RouteSpec) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    # Imported here: guards depend on services, which depend on the web json helpers.
    from tenantd.auth.guards import guard
    from tenantd.web.body import check_csrf, check_path, parse_body, parse_query

    async def handler(request: web.Request) -> web.StreamResponse:
        request[appkeys.route_spec] = spec
        check_csrf(request, spec)
        await guard(request, spec.access)
        check_path(request)
        args: list[Any] = []
        if spec.query is not None:
            args.append(parse_query(request, spec.query))
        body = None
        if spec.body is not None:
            body = await parse_body(request, spec.body, limit=spec.body_limit)
            args.append(body)
        if spec.rate_limit is not None:
            from tenantd.ops.http import rate_limit_request

            await rate_limit_request(request, spec.rate_limit, body)
        result = await spec.view(request, *args)
        if isinstance(result, web.StreamResponse):
            return result
        if spec.wrapped:
            return ok(result, status=spec.status)
        from tenantd.web.json import json_response

        return json_response(result, status=spec.status)

    handler.__name__ = spec.view.__name__
    return handler


def register(app: web.Application, *tables: Routes) -> None:
    specs = app.get(ROUTE_SPEC)
    if specs is None:
        specs = []
        app[ROUTE_SPEC] = specs
    for table in tables:
        for spec in table.specs:
            app.router.add_route(spec.method, spec.path, build_handler(spec))
            specs.append(spec)
