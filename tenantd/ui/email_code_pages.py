"""Pages of sign-in by email (MAGIC_LINK_ENABLED): ask for a code (with the bot check when one
is configured), type it in, or open the mail's link, which shows a button that confirms with
a POST (mail scanners that fetch links do not spend it)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.auth import email_code
from tenantd.auth.schemas import CaptchaEmailBody, EmailCodeVerifyBody
from tenantd.bundle import SERVICES
from tenantd.errors import NotFound
from tenantd.identity.settings import SignInSettings
from tenantd.ui.auth_pages import captcha_token, signed_in_or_mfa
from tenantd.ui.forms import Form, again, field, parse, safe_next, submit
from tenantd.ui.render import page, redirect
from tenantd.ui.session import client_meta, load_viewer
from tenantd.ui.strings import text
from tenantd.web.ratelimit import rate_limit_request

TEMPLATE = "email_code.html"


def _enabled(request: web.Request) -> None:
    if not request.app[SERVICES].settings.section(SignInSettings).magic_link_enabled:
        raise NotFound()


async def email_code_page(request: web.Request) -> web.StreamResponse:
    """Step one: the address (and the bot check)."""
    _enabled(request)
    next_path = safe_next(request.query.get("next"), "")
    if await load_viewer(request):
        return redirect(request, next_path or "/notifications")
    return page(
        request,
        TEMPLATE,
        title=text("emailcode.title"),
        step="request",
        values={"email": request.query.get("email", "")[:320]},
        next=next_path,
        problem=None,
    )


async def email_code_post(request: web.Request) -> web.StreamResponse:
    """Mail the code, then step two: the code form (the same page for every address)."""
    kept: dict[str, Any] = {"step": "request", "values": {}, "next": ""}

    async def action(form: Form) -> web.StreamResponse:
        kept["values"] = values = {"email": field(form, "email").strip()}
        kept["next"] = safe_next(field(form, "next"), "")
        body = parse(CaptchaEmailBody, values)
        await rate_limit_request(request, "email_code", body)
        await email_code.request_code(
            request.app[SERVICES],
            email=body.email,
            client=client_meta(request),
            captcha_token=captcha_token(request, form),
        )
        kept["step"] = "code"
        return page(request, TEMPLATE, title=text("emailcode.title"), **kept, problem=None)

    _enabled(request)
    return await submit(request, action, again(request, TEMPLATE, text("emailcode.title"), kept))


async def email_code_verify_post(request: web.Request) -> web.StreamResponse:
    """Sign in with the typed code (or on to the MFA step)."""
    kept: dict[str, Any] = {"step": "code", "values": {}, "next": ""}

    async def action(form: Form) -> web.StreamResponse:
        kept["values"] = {"email": field(form, "email").strip()}
        kept["next"] = next_path = safe_next(field(form, "next"), "")
        code = "".join(field(form, "code").split())
        body = parse(EmailCodeVerifyBody, {**kept["values"], "code": code})
        await rate_limit_request(request, "email_code_verify", body)
        result = await email_code.verify(
            request.app[SERVICES],
            email=body.email,
            code=body.code,
            token=None,
            client=client_meta(request),
        )
        return signed_in_or_mfa(request, result, next_path)

    _enabled(request)
    refused = again(request, TEMPLATE, text("emailcode.title"), kept)
    return await submit(request, action, refused, form_action="/login/email-code/verify")


async def email_link_page(request: web.Request) -> web.Response:
    """The mail's link: a button, so that only a person's POST spends it."""
    _enabled(request)
    return page(
        request,
        TEMPLATE,
        title=text("emaillink.title"),
        step="link",
        token=request.query.get("token", "")[:4000],
        values={},
        next="",
        problem=None,
    )


async def email_link_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"step": "link", "token": "", "values": {}, "next": ""}

    async def action(form: Form) -> web.StreamResponse:
        kept["token"] = field(form, "token")
        body = parse(EmailCodeVerifyBody, {"token": kept["token"]})
        await rate_limit_request(request, "email_code_verify", body)
        result = await email_code.verify(
            request.app[SERVICES],
            email=None,
            code=None,
            token=body.token,
            client=client_meta(request),
        )
        return signed_in_or_mfa(request, result, "")

    _enabled(request)
    return await submit(request, action, again(request, TEMPLATE, text("emaillink.title"), kept))
