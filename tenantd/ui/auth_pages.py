"""Pages of signing up, verifying, signing in and out, password reset and invitations."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlencode

from aiohttp import web

from tenantd.accounts import invitations
from tenantd.accounts.schemas import AcceptBody
from tenantd.auth import captcha
from tenantd.auth import service as auth_service
from tenantd.auth.schemas import (
    EmailBody,
    LoginBody,
    PasswordResetConfirmBody,
    RegisterBody,
    VerifyEmailBody,
)
from tenantd.errors import NotFound
from tenantd.identity.bundle import SERVICES
from tenantd.identity.cookies import (
    BINDING_COOKIE,
    REFRESH_COOKIE,
    clear_binding_cookie,
    clear_cookie,
    set_binding_cookie,
    set_cookie,
)
from tenantd.mfa import service as mfa
from tenantd.sso import service as sso_service
from tenantd.ui.account_pages import work_in
from tenantd.ui.forms import Form, Problem, again, field, parse, read_form, safe_next, submit
from tenantd.ui.render import page, redirect
from tenantd.ui.session import DEVICE, ISSUED, STALE, client_meta, load_viewer
from tenantd.ui.strings import done_text, oauth_error_text, text
from tenantd.web.ratelimit import rate_limit_request

# Where a sign-up started (an invitation, say): the verified browser goes back there.
NEXT_COOKIE = "tenantd_next"


def _notice(request: web.Request) -> str | None:
    return done_text(request.query.get("done"))


def captcha_token(request: web.Request, form: Form) -> str | None:
    """The bot check's token the provider's widget put into the form (None when off)."""
    widget = captcha.provider(request.app[SERVICES].settings)
    return (field(form, widget.form_field) or None) if widget else None


def signed_in_or_mfa(
    request: web.Request,
    result: auth_service.SignedIn | auth_service.MfaPending,
    next_path: str,
) -> web.Response:
    """After a first factor: on to `next_path` signed in, or to the MFA step (its ticket
    bound to this browser) for a user with a second factor."""
    if isinstance(result, auth_service.MfaPending):
        return _mfa_step(request, result.ticket, next_path)
    request[ISSUED] = result.tokens
    if result.device is not None:
        request[DEVICE] = result.device
    return redirect(request, next_path or "/notifications")


async def signup_page(request: web.Request) -> web.Response:
    if await load_viewer(request):
        return redirect(request, safe_next(request.query.get("next")))
    return page(
        request,
        "signup.html",
        title=text("signup.title"),
        values={"email": request.query.get("email", "")},
        next=safe_next(request.query.get("next"), ""),
        problem=None,
    )


async def signup_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"values": {}, "next": ""}

    async def action(form: Form) -> web.StreamResponse:
        kept["values"] = values = {
            "email": field(form, "email").strip(),
            "firstName": field(form, "firstName").strip(),
            "lastName": field(form, "lastName").strip(),
        }
        kept["next"] = next_path = safe_next(field(form, "next"), "")
        body = parse(RegisterBody, {**values, "password": field(form, "password")})
        await rate_limit_request(request, "register", body)
        result = await auth_service.register(
            request.app[SERVICES],
            email=body.email,
            password=body.password,
            first_name=body.first_name,
            last_name=body.last_name,
            captcha_token=captcha_token(request, form),
            ip=client_meta(request).ip,
        )
        # PASSWORD_BREACH_CHECK=warn: the inbox page says the password is a known one.
        warned = "&warn=password_breached" if result.warnings else ""
        response = redirect(request, f"/check-inbox?email={quote(str(body.email))}{warned}")
        settings = request.app[SERVICES].settings
        ttl = int(auth_service.VERIFY_TTL.total_seconds())
        set_binding_cookie(response, settings, result.binding, max_age=ttl)
        if next_path:
            set_cookie(response, settings, NEXT_COOKIE, quote(next_path, safe=""), max_age=ttl)
        return response

    return await submit(request, action, again(request, "signup.html", text("signup.title"), kept))


async def check_inbox_page(request: web.Request) -> web.Response:
    return page(
        request,
        "check_inbox.html",
        title=text("inbox.title"),
        email=request.query.get("email", "")[:320],
        resent=request.query.get("resent") == "1",
        breached=request.query.get("warn") == "password_breached",
        problem=None,
    )


async def check_inbox_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"email": "", "resent": False}

    async def action(form: Form) -> web.StreamResponse:
        kept["email"] = email = field(form, "email").strip()
        body = parse(EmailBody, {"email": email})
        await rate_limit_request(request, "resend_verification", body)
        await auth_service.resend_verification(request.app[SERVICES], email=body.email)
        return redirect(request, f"/check-inbox?email={quote(email)}&resent=1")

    refused = again(request, "check_inbox.html", text("inbox.title"), kept)
    return await submit(request, action, refused)


async def verify_page(request: web.Request) -> web.Response:
    return page(
        request,
        "verify.html",
        title=text("verify.title"),
        token=request.query.get("token", "")[:4000],
        problem=None,
    )


async def verify_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"token": ""}
    services = request.app[SERVICES]

    async def action(form: Form) -> web.StreamResponse:
        kept["token"] = field(form, "token")
        body = parse(VerifyEmailBody, {"token": kept["token"]})
        result = await auth_service.verify_email(
            services,
            token=body.token,
            binding=request.cookies.get(BINDING_COOKIE),
            client=client_meta(request),
        )
        started = safe_next(unquote(request.cookies.get(NEXT_COOKIE, "")), "")
        if isinstance(result, auth_service.VerifiedMfaPending):
            # The address is verified; the user's second factor still has to come.
            response = _mfa_step(request, result.ticket, started)
        else:
            request[ISSUED] = result.tokens
            if result.device is not None:
                request[DEVICE] = result.device
            response = redirect(request, started or "/notifications?done=welcome")
        if result.binding_used:
            clear_binding_cookie(response, services.settings)
        if started:
            clear_cookie(response, services.settings, NEXT_COOKIE)
        return response

    return await submit(request, action, again(request, "verify.html", text("verify.title"), kept))


async def login_page(request: web.Request) -> web.Response:
    next_path = safe_next(request.query.get("next"), "")
    code = request.query.get("error")
    # A signed-in visitor moves on, unless a refusal (a provider step-up) is to be read here.
    if not code and await load_viewer(request):
        return redirect(request, next_path or "/notifications")
    return page(
        request,
        "login.html",
        title=text("login.title"),
        values={"email": request.query.get("email", "")[:320]},
        next=next_path,
        notice=_notice(request),
        problem=None,
        oauth_error=oauth_error_text(code) if code else None,
    )


def _mfa_step(request: web.Request, ticket: mfa.Ticket, next_path: str) -> web.Response:
    """To the second-factor page with the ticket, bound to this browser by a cookie."""
    query = urlencode({"ticket": ticket.ticket, **({"next": next_path} if next_path else {})})
    response = redirect(request, f"/login/mfa?{query}")
    set_cookie(
        response,
        request.app[SERVICES].settings,
        mfa.BINDING_COOKIE,
        ticket.binding,
        max_age=mfa.TICKET_TTL_SECONDS,
    )
    return response


async def login_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"values": {}, "next": "", "notice": None, "oauth_error": None}

    async def action(form: Form) -> web.StreamResponse:
        kept["values"] = values = {"email": field(form, "email").strip()}
        kept["next"] = next_path = safe_next(field(form, "next"), "")
        # Home-realm discovery: the email first; a domain with an SSO connection goes to its
        # identity provider ("Continue with single sign-on", or no password typed).
        if field(form, "sso") or not field(form, "password"):
            sso_start = await _sso_start(request, values["email"], next_path)
            if sso_start is not None:
                return redirect(request, sso_start)
        body = parse(LoginBody, {**values, "password": field(form, "password")})
        await rate_limit_request(request, "login", body)
        result = await auth_service.login(
            request.app[SERVICES],
            email=body.email,
            password=body.password,
            client=client_meta(request),
            captcha_token=captcha_token(request, form),
        )
        return signed_in_or_mfa(request, result, next_path)

    async def refused(issue: Problem) -> web.StreamResponse:
        if issue.code == "SSO_REQUIRED":  # an enforced connection: its provider, not an error
            sso_start = await _sso_start(request, kept["values"].get("email", ""), kept["next"])
            if sso_start is not None:
                return redirect(request, sso_start)
        kept["unverified"] = issue.code == "EMAIL_NOT_VERIFIED"
        return await again(request, "login.html", text("login.title"), kept)(issue)

    return await submit(request, action, refused)


async def _sso_start(request: web.Request, email: str, next_path: str) -> str | None:
    """Where sign-in through the SSO connection of the address's domain starts, if any."""
    if "@" not in email:
        return None
    try:
        connection = await sso_service.find_connection(request.app[SERVICES], email=email)
    except NotFound:
        return None
    query = {"connection": str(connection["id"]), "returnTo": next_path or "/notifications"}
    return f"/sso/start?{urlencode(query)}"


async def logout_post(request: web.Request) -> web.Response:
    await read_form(request)
    viewer = await load_viewer(request)
    if viewer is not None:
        await auth_service.logout(
            request.app[SERVICES],
            refresh_token=request.cookies.get(REFRESH_COOKIE),
            access=viewer.principal.claims,
        )
    request.pop(ISSUED, None)
    request[STALE] = True
    return redirect(request, "/login?done=signed_out")


async def logout_all_post(request: web.Request) -> web.Response:
    await read_form(request)
    viewer = await load_viewer(request)
    if viewer is not None:
        await auth_service.logout_all(request.app[SERVICES], user_id=viewer.principal.user_id)
    request.pop(ISSUED, None)
    request[STALE] = True
    return redirect(request, "/login?done=signed_out")


async def reset_page(request: web.Request) -> web.Response:
    token = request.query.get("token", "")[:4000]
    return page(
        request,
        "reset_confirm.html" if token else "reset_request.html",
        title=text("reset.confirm_title" if token else "reset.title"),
        token=token,
        sent=request.query.get("sent") == "1",
        values={"email": ""},
        problem=None,
    )


async def reset_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"token": "", "sent": False, "values": {"email": ""}}

    async def action(form: Form) -> web.StreamResponse:
        kept["values"] = {"email": field(form, "email").strip()}
        body = parse(EmailBody, kept["values"])
        await rate_limit_request(request, "password_reset", body)
        await auth_service.request_password_reset(
            request.app[SERVICES],
            email=body.email,
            captcha_token=captcha_token(request, form),
            ip=client_meta(request).ip,
        )
        return redirect(request, "/reset-password?sent=1")

    refused = again(request, "reset_request.html", text("reset.title"), kept)
    return await submit(request, action, refused)


async def reset_confirm_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"token": "", "sent": False, "values": {}}

    async def action(form: Form) -> web.StreamResponse:
        kept["token"] = field(form, "token")
        body = parse(
            PasswordResetConfirmBody, {"token": kept["token"], "password": field(form, "password")}
        )
        warnings = await auth_service.confirm_password_reset(
            request.app[SERVICES], token=body.token, password=body.password
        )
        request[STALE] = True  # the reset ended every session, this browser's too
        done = "password_reset_breached" if warnings else "password_reset"
        return redirect(request, f"/login?done={done}")

    refused = again(request, "reset_confirm.html", text("reset.confirm_title"), kept)
    return await submit(request, action, refused)


async def invitation_page(request: web.Request) -> web.Response:
    token = request.query.get("token", "")[:4000]
    await load_viewer(request)
    here = f"/invitations/accept?token={quote(token)}"
    return page(
        request,
        "invitation.html",
        title=text("invite.title"),
        token=token,
        here=here,
        problem=None,
    )


async def invitation_post(request: web.Request) -> web.StreamResponse:
    kept: dict[str, Any] = {"token": "", "here": "/invitations/accept?token="}
    viewer = await load_viewer(request)

    async def action(form: Form) -> web.StreamResponse:
        kept["token"] = token = field(form, "token")
        kept["here"] = f"/invitations/accept?token={quote(token)}"
        if viewer is None:
            return redirect(request, "/login?next=" + quote(f"/invitations/accept?token={token}"))
        body = parse(AcceptBody, {"token": token})
        accepted = await invitations.accept_invitation(
            request.app[SERVICES],
            viewer.principal,
            token=body.token,
            refresh_token=request.cookies.get(REFRESH_COOKIE),
        )
        await work_in(request, viewer, accepted.account["id"], accepted.activation)
        return redirect(request, f"/accounts/{accepted.account['id']}/members?done=joined")

    refused = again(request, "invitation.html", text("invite.title"), kept)
    return await submit(request, action, refused)
