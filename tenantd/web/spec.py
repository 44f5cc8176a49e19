"""Declarative route table: the API's routes and the hosted pages, one `RouteSpec` each,
with its flags (page or API, who may call it, mfa_exempt, rate-limit class, listed in the
OpenAPI document or not). requireAuth is the default.

An API view is `async def view(request[, query][, body]) -> data | web.StreamResponse`: the
router wraps it with the CSRF check, the guard, the rate limit and body parsing, and envelopes
plain data. Its signature declares its models once: the annotations of its `query` and `body`
parameters are the models the router parses, and a return annotation that is a model (or a
list of models) is the documented answer; `response=` names the answer of a view that
returns a `web.Response` or plain data.

A page is `async def page(request[, viewer]) -> web.StreamResponse`: the router runs the
pages' guard (the viewer of an AUTH page, or off to sign in) and shows a page's refusal in
words.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, get_args, get_origin

from aiohttp import web
from pydantic import BaseModel

View = Callable[..., Awaitable[Any]]

API_BODY_LIMIT = 1024 * 1024  # 1 MiB for API routes (INTERFACE.md)
WEBHOOK_BODY_LIMIT = 10 * 1024 * 1024  # 10 MiB for webhook routes


class Access(enum.Enum):
    AUTH = "requireAuth"  # default: a valid session cookie is required
    TRY = "tryAuth"  # anonymous is a legitimate state (only /me, /refresh, /mfa/status)
    PUBLIC = "public"  # no session needed (sign-up, sign-in, health)
    SIGNATURE = "signature"  # authenticated by a request signature (webhooks)
    API_KEY = "apiKey"  # server routes: `Authorization: Bearer tdk_...` holding `RouteSpec.scope`


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
    # The API-key scope a server route (Access.API_KEY) requires, e.g. "events:read"; a
    # tuple: any one of them.
    scope: str | tuple[str, ...] | None = None
    # Served to a session that owes its account's second factor (Principal.owes_factor): the
    # few routes that tell the state, step up, enrol a factor or leave the account.
    mfa_exempt: bool = False
    # Media type of the error answers when the route answers its own protocol's errors (a
    # SCIM Error, say) instead of the API's envelope.
    errors_as: str = "application/json"
    # A hosted page (HTML, form posts) rather than an API route.
    page: bool = False
    # Listed in /api/v1/openapi.json (the pages are not).
    include_in_openapi: bool = True
    # A form post of the pages: the router reads the form (origin and token checked) and
    # hands it to the view; a refusal answers `again(request[, viewer], form | None, error)`,
    # the form's page again with the problem in words.
    again: View | None = None

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def _is_model(annotation: Any) -> bool:
    """A pydantic model, or a list of them (what a view's answer may be documented as)."""
    if get_origin(annotation) is list:
        return _is_model(get_args(annotation)[0])
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


class Signature(NamedTuple):
    """The models a view's signature names (None where it names none)."""

    query: Any = None
    body: Any = None
    response: Any = None


def signature_models(view: View) -> Signature:
    """The query and body models an API view takes, and the model it answers."""
    annotations = inspect.get_annotations(inspect.unwrap(view), eval_str=True)
    answer = annotations.get("return")
    return Signature(
        annotations.get("query"), annotations.get("body"), answer if _is_model(answer) else None
    )


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
        scope: str | tuple[str, ...] | None = None,
        mfa_exempt: bool = False,
        errors_as: str = "application/json",
        page: bool = False,
        again: View | None = None,
    ) -> Callable[[View], View]:
        if (access is Access.API_KEY) != (scope is not None):
            raise ValueError(f"{method} {path}: a scope goes with Access.API_KEY, and only there")

        def decorate(view: View) -> View:
            limit = body_limit or (
                WEBHOOK_BODY_LIMIT if access is Access.SIGNATURE else API_BODY_LIMIT
            )
            declared = Signature() if page else signature_models(view)
            query_model = query or declared.query
            body_model = body or declared.body
            response_model = response or declared.response
            self.specs.append(
                RouteSpec(
                    method=method,
                    path=path,
                    view=view,
                    access=access,
                    body=body_model,
                    query=query_model,
                    response=response_model,
                    status=status,
                    summary=summary or (inspect.getdoc(view) or "").split("\n")[0],
                    tag=self.tag,
                    wrapped=wrapped,
                    body_limit=limit,
                    responses=responses or {},
                    content_type=content_type,
                    rate_limit=rate_limit,
                    produces=produces,
                    scope=scope,
                    mfa_exempt=mfa_exempt,
                    errors_as=errors_as,
                    page=page,
                    include_in_openapi=not page,
                    again=again,
                )
            )
            return view

        return decorate

    def page(
        self,
        method: str,
        path: str,
        view: View,
        *,
        access: Access = Access.AUTH,
        again: View | None = None,
    ) -> None:
        """A hosted page: AUTH is a signed-in page (anyone else is sent to sign in), PUBLIC
        is open to all; its errors are shown in words. With `again`, a form post: the view
        takes the checked form, a refusal shows the form again."""
        if access not in (Access.AUTH, Access.PUBLIC):
            raise ValueError(f"{method} {path}: a page is AUTH or PUBLIC")
        self.route(
            method,
            path,
            access=access,
            wrapped=False,
            content_type="application/x-www-form-urlencoded",
            produces="text/html",
            page=True,
            again=again,
        )(view)

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


# Shared route arguments (`**` them into a declaration).
# Open to anyone and answered as it is, without the API's envelope (probes, documents, keys).
OPEN_AS_IS: dict[str, Any] = {"access": Access.PUBLIC, "wrapped": False}
# A browser navigation answered with a redirect, not with JSON.
REDIRECT: dict[str, Any] = {"status": 302, "wrapped": False}


# The route a request matched (set before the guard runs).
CURRENT_ROUTE: web.RequestKey[RouteSpec] = web.RequestKey("current_route")
