"""Form posts of the pages: size cap, same-origin and per-form token checks, pydantic
validation with the API's own body models, and errors in words."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiDictProxy
from pydantic import BaseModel

from tenantd.errors import AppError, Forbidden, PayloadTooLarge
from tenantd.settings import SETTINGS
from tenantd.ui import csrf
from tenantd.ui.render import page
from tenantd.ui.session import Viewer
from tenantd.ui.strings import done_text, error_text, text
from tenantd.web.body import validate
from tenantd.web.spec import View

Model = TypeVar("Model", bound=BaseModel)
FORM_LIMIT = 64 * 1024


class FormRefused(Forbidden):
    """A post without a valid token or from another origin."""


async def read_form(request: web.Request, action: str | None = None) -> MultiDictProxy[Any]:
    """The posted fields, after the same-origin check and the form token of `action`."""
    if request.content_length is not None and request.content_length > FORM_LIMIT:
        raise PayloadTooLarge()
    settings = request.app[SETTINGS]
    if not csrf.same_origin(request, settings):
        raise FormRefused(text("error.cross_site"))
    form = await request.post()
    token = form.get(csrf.FIELD)
    if not isinstance(token, str) or not csrf.valid_token(
        request, settings, action or request.path, token
    ):
        raise FormRefused(text("error.form_expired"))
    return form


def field(form: MultiDictProxy[Any] | None, name: str) -> str:
    """A posted text field ("" when missing, not text, or the form was refused: None)."""
    value = form.get(name, "") if form is not None else ""
    return value if isinstance(value, str) else ""


def link_token(request: web.Request) -> str:
    """The token of a mailed link (`?token=`), cut to the length no real token reaches."""
    return request.query.get("token", "")[:4000]


def done_notice(request: web.Request) -> str | None:
    """The confirmation a page shows after a form's redirect (`?done=`), or None."""
    return done_text(request.query.get("done"))


def parse(model: type[Model], data: dict[str, Any]) -> Model:
    """Validate with the API's body model (same rules as the JSON routes)."""
    return validate(model, data)


@dataclass
class Problem:
    """What went wrong, in words: one sentence and per-field notes."""

    message: str
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    status: int = 400
    code: str = ""
    # REAUTH_REQUIRED: how the user can confirm it is them (password, totp, passkey).
    methods: list[str] = dataclasses.field(default_factory=list)
    providers: list[str] = dataclasses.field(default_factory=list)  # for the `provider` method
    # RATE_LIMITED (and 503): seconds until a retry can succeed; the page says Retry-After.
    retry_after: int | None = None


def problem(exc: AppError) -> Problem:
    generic = exc.message == type(exc).message
    fields: dict[str, str] = {}
    if exc.details and isinstance(exc.details.get("fields"), dict):
        fields = {str(k): str(v) for k, v in exc.details["fields"].items()}
    methods: list[str] = []
    if exc.details and isinstance(exc.details.get("methods"), list):
        methods = [str(m) for m in exc.details["methods"]]
    providers: list[str] = []
    if exc.details and isinstance(exc.details.get("providers"), list):
        providers = [str(p) for p in exc.details["providers"]]
    return Problem(
        message=error_text(exc.code, exc.message, generic=generic),
        fields=fields,
        status=exc.status,
        code=exc.code,
        methods=methods,
        providers=providers,
        retry_after=getattr(exc, "retry_after", None),
    )


def safe_next(value: str | None, default: str = "/notifications") -> str:
    """A same-origin path to go to after signing in (never another host)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(ch in value for ch in "\r\n\t\\") or len(value) > 1000:
        return default
    return value


# -- a form post's refusal ---------------------------------------------------------------------
# The router reads a form page's form (`read_form`) and hands it to the page; a refusal shows the
# page again through the route's `again` renderer (tenantd/ui/routes.py).

Form = MultiDictProxy[Any]


def problem_page(
    request: web.Request, template: str, title: str, issue: Problem | None, **context: Any
) -> web.Response:
    """A page that may show a refusal in words (`issue`): then with its status, else 200."""
    status = issue.status if issue is not None else 200
    return page(request, template, status=status, title=title, **context, problem=issue)


def refused_page(
    request: web.Request,
    template: str,
    title: str,
    exc: AppError | None,
    *,
    words: Callable[[AppError], Problem] = problem,
    **context: Any,
) -> web.Response:
    """A form's page, with a refusal (`exc`) in `words` when there was one."""
    issue = words(exc) if exc is not None else None
    return problem_page(request, template, title, issue, **context)


def shown_again(
    request: web.Request, template: str, title: str, exc: AppError, **kept: Any
) -> web.Response:
    """A form's page again after a refusal: what was typed (`kept`), the refusal's status
    and its problem in words."""
    return refused_page(request, template, title, exc, **kept)


def again_showing(show: Callable[..., Awaitable[web.Response]], **kept: str) -> View:
    """The `again` of a signed-in form page: `show(request, viewer, issue=...)` once more,
    the refusal in words and what was typed in the fields `kept` names (keyword=field)."""

    async def again(
        request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
    ) -> web.Response:
        typed = {name: field(form, posted).strip() for name, posted in kept.items()}
        return await show(request, viewer, issue=problem(exc), **typed)

    return again
