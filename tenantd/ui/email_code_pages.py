"""Pages of sign-in by email (MAGIC_LINK_ENABLED): ask for a code (with the bot check when one
is configured), type it in, or open the mail's link, which shows a button that confirms with
a POST (mail scanners that fetch links do not spend it)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.auth import email_code
from tenantd.auth.domain import auth_of
from tenantd.auth.schemas import CaptchaEmailBody, EmailCodeVerifyBody
from tenantd.errors import AppError, NotFound
from tenantd.identity.settings import SignInSettings
from tenantd.settings import SETTINGS
from tenantd.ui.auth_pages import captcha_token, signed_in_or_mfa
from tenantd.ui.forms import Form, field, link_token, parse, refused_page, safe_next
from tenantd.ui.render import redirect
from tenantd.ui.session import client_meta, load_viewer
from tenantd.ui.strings import text
from tenantd.web.ratelimit import rate_limit_request

TEMPLATE = "email_code.html"


def _enabled(request: web.Request) -> None:
    if not request.app[SETTINGS].section(SignInSettings).magic_link_enabled:
        raise NotFound()


async def email_code_page(request: web.Request) -> web.StreamResponse:
    """Step one: the address (and the bot check)."""
    _enabled(request)
    next_path = safe_next(request.query.get("next"), "")
    if await load_viewer(request):
        return redirect(request, next_path or "/notifications")
    email = request.query.get("email", "")[:320]
    return _code_page(request, "request", {"email": email}, next_path)


async def email_code_post(request: web.Request, form: Form) -> web.StreamResponse:
    """Mail the code, then step two: the code form (the same page for every address)."""
    _enabled(request)
    body = parse(CaptchaEmailBody, {"email": field(form, "email").strip()})
    await rate_limit_request(request, "email_code", body)
    await email_code.request_code(
        auth_of(request.app),
        email=body.email,
        client=client_meta(request),
        captcha_token=captcha_token(request, form),
    )
    return _code_page(request, "code", *_typed(form))


def _code_page(
    request: web.Request,
    step: str,
    values: dict[str, str],
    next_path: str = "",
    *,
    token: str = "",
    exc: AppError | None = None,
) -> web.Response:
    """The email-code page at `step` (request, code, link), with what was typed."""
    _enabled(request)  # off: not found, whatever the form held
    link: dict[str, Any] = {"token": token} if step == "link" else {}
    return refused_page(
        request,
        TEMPLATE,
        text("emaillink.title" if step == "link" else "emailcode.title"),
        exc,
        step=step,
        values=values,
        next=next_path,
        **link,
    )


def _typed(form: Form | None) -> tuple[dict[str, str], str]:
    """The address and the next path a form posted (none when the form was refused)."""
    if form is None:
        return {}, ""
    return {"email": field(form, "email").strip()}, safe_next(field(form, "next"), "")


async def email_code_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    return _code_page(request, "request", *_typed(form), exc=exc)


async def email_code_verify_post(request: web.Request, form: Form) -> web.StreamResponse:
    """Sign in with the typed code (or on to the MFA step)."""
    _enabled(request)
    code = "".join(field(form, "code").split())
    body = parse(EmailCodeVerifyBody, {"email": field(form, "email").strip(), "code": code})
    await rate_limit_request(request, "email_code_verify", body)
    result = await email_code.verify(auth_of(request.app), body, client=client_meta(request))
    return signed_in_or_mfa(request, result, safe_next(field(form, "next"), ""))


async def email_code_verify_again(
    request: web.Request, form: Form | None, exc: AppError
) -> web.Response:
    return _code_page(request, "code", *_typed(form), exc=exc)


async def email_link_page(request: web.Request) -> web.Response:
    """The mail's link: a button, so that only a person's POST spends it."""
    return _code_page(request, "link", {}, token=link_token(request))


async def email_link_post(request: web.Request, form: Form) -> web.StreamResponse:
    _enabled(request)
    body = parse(EmailCodeVerifyBody, {"token": field(form, "token")})
    await rate_limit_request(request, "email_code_verify", body)
    result = await email_code.verify(auth_of(request.app), body, client=client_meta(request))
    return signed_in_or_mfa(request, result, "")


async def email_link_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    token = field(form, "token")
    return _code_page(request, "link", {}, token=token, exc=exc)
