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
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypedDict, Unpack, get_args, get_origin

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
    tag: str
    access: Access = Access.AUTH
    # The models parsed and documented (undeclared: the view's signature's, `Routes.route`).
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    response: Any = None
    status: int = 200
    # The view's first docstring line unless declared.
    summary: str = ""
    wrapped: bool = True
    # 0 in a declaration: the access's limit (API_BODY_LIMIT, WEBHOOK_BODY_LIMIT for webhooks).
    body_limit: int = 0
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
    # A form post of the pages: the router reads the form (origin and token checked) and
    # hands it to the view; a refusal answers `again(request[, viewer], form | None, error)`,
    # the form's page again with the problem in words.
    again: View | None = None

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def include_in_openapi(self) -> bool:
        """Listed in /api/v1/openapi.json (the pages are not)."""
        return not self.page


class RouteOptions(TypedDict, total=False):
    """What a route's declaration may say: the `RouteSpec` fields of these names, passed
    along as they are."""

    access: Access
    query: type[BaseModel] | None
    body: type[BaseModel] | None
    response: Any
    status: int
    summary: str
    wrapped: bool
    body_limit: int
    responses: dict[int, str]
    content_type: str
    rate_limit: str | None
    produces: str
    scope: str | tuple[str, ...] | None
    mfa_exempt: bool
    errors_as: str
    page: bool
    again: View | None


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
    """A domain's routes; `create_app` registers every domain's table.

    `state`, when given, makes what the table's views keep per application (a cache, a pool
    of slots) under the application's keys when the table is registered: a started
    application is frozen, so nothing can be added on first use."""

    def __init__(self, tag: str, *, state: Callable[[web.Application], None] | None = None):
        self.tag = tag
        self.state = state
        self.specs: list[RouteSpec] = []

    def route(
        self, method: str, path: str, **options: Unpack[RouteOptions]
    ) -> Callable[[View], View]:
        """Add the decorated view's route: `options` as its RouteSpec says them, the models,
        summary and body limit left out taken from the view's signature, its docstring and
        its access."""
        if (options.get("access") is Access.API_KEY) != (options.get("scope") is not None):
            raise ValueError(f"{method} {path}: a scope goes with Access.API_KEY, and only there")

        def decorate(view: View) -> View:
            spec = RouteSpec(method, path, view, self.tag, **options)
            declared = Signature() if spec.page else signature_models(view)
            limit = WEBHOOK_BODY_LIMIT if spec.access is Access.SIGNATURE else API_BODY_LIMIT
            self.specs.append(
                replace(
                    spec,
                    query=spec.query or declared.query,
                    body=spec.body or declared.body,
                    response=spec.response or declared.response,
                    summary=spec.summary or (inspect.getdoc(view) or "").split("\n")[0],
                    body_limit=spec.body_limit or limit,
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

    def get(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[View], View]:
        return self.route("GET", path, **options)

    def post(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[View], View]:
        return self.route("POST", path, **options)

    def put(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[View], View]:
        return self.route("PUT", path, **options)

    def patch(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[View], View]:
        return self.route("PATCH", path, **options)

    def delete(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[View], View]:
        return self.route("DELETE", path, **options)


# Shared route arguments (`**` them into a declaration).
# Open to anyone and answered as it is, without the API's envelope (probes, documents, keys).
OPEN_AS_IS: dict[str, Any] = {"access": Access.PUBLIC, "wrapped": False}
# A browser navigation answered with a redirect, not with JSON.
REDIRECT: dict[str, Any] = {"status": 302, "wrapped": False}


# The route a request matched (set before the guard runs).
CURRENT_ROUTE: web.RequestKey[RouteSpec] = web.RequestKey("current_route")
