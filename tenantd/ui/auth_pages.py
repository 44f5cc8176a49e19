"""Pages of signing up, verifying, signing in and out, password reset and invitations."""

from __future__ import annotations

from urllib.parse import quote, unquote, urlencode

from aiohttp import web

from tenantd.accounts import invitations
from tenantd.accounts.domain import accounts_of
from tenantd.accounts.schemas import AcceptBody
from tenantd.auth import captcha
from tenantd.auth import service as auth_service
from tenantd.auth.domain import auth_of
from tenantd.auth.schemas import (
    EmailBody,
    LoginBody,
    PasswordResetConfirmBody,
    RegisterBody,
    VerifyEmailBody,
)
from tenantd.errors import AppError, NotFound
from tenantd.identity.cookies import (
    BINDING_COOKIE,
    REFRESH_COOKIE,
    clear_binding_cookie,
    clear_cookie,
    set_binding_cookie,
    set_cookie,
)
from tenantd.mfa import service as mfa
from tenantd.settings import SETTINGS
from tenantd.sso import service as sso_service
from tenantd.sso.domain import sso_of
from tenantd.ui.account_pages import work_in
from tenantd.ui.forms import (
    Form,
    done_notice,
    field,
    link_token,
    parse,
    read_form,
    refused_page,
    safe_next,
    shown_again,
)
from tenantd.ui.render import page, redirect
from tenantd.ui.session import DEVICE, ISSUED, STALE, Viewer, client_meta, load_viewer
from tenantd.ui.strings import oauth_error_text, text
from tenantd.web.ratelimit import rate_limit_request

# Where a sign-up started (an invitation, say): the verified browser goes back there.
NEXT_COOKIE = "tenantd_next"


def captcha_token(request: web.Request, form: Form) -> str | None:
    """The bot check's token the provider's widget put into the form (None when off)."""
    widget = captcha.provider(request.app[SETTINGS])
    return (field(form, widget.form_field) or None) if widget else None


def signed_in_or_mfa(
    request: web.Request,
    result: auth_service.SignedIn
    | auth_service.MfaPending
    | auth_service.Verified
    | auth_service.VerifiedMfaPending,
    next_path: str,
    *,
    landing: str = "/notifications",
) -> web.Response:
    """After a first factor (or a verified address): on to `next_path` (else `landing`)
    signed in, or to the MFA step (its ticket bound to this browser, then `next_path`) for a
    user with a second factor."""
    if isinstance(result, auth_service.MfaPending | auth_service.VerifiedMfaPending):
        return _mfa_step(request, result.ticket, next_path)
    request[ISSUED] = result.tokens
    if result.device is not None:
        request[DEVICE] = result.device
    return redirect(request, next_path or landing)


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


async def signup_post(request: web.Request, form: Form) -> web.StreamResponse:
    secrets = {"password": field(form, "password"), "captchaToken": captcha_token(request, form)}
    body = parse(RegisterBody, {**_signup_values(form), **secrets})
    await rate_limit_request(request, "register", body)
    result = await auth_service.register(auth_of(request.app), body, ip=client_meta(request).ip)
    return _to_inbox(request, result, body.email, safe_next(field(form, "next"), ""))


def _signup_values(form: Form | None) -> dict[str, str]:
    names = ("email", "firstName", "lastName")
    return {name: field(form, name).strip() for name in names} if form is not None else {}


async def signup_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    next_path = safe_next(field(form, "next"), "")
    values = _signup_values(form)
    return shown_again(
        request, "signup.html", text("signup.title"), exc, values=values, next=next_path
    )


def _to_inbox(
    request: web.Request, result: auth_service.Registered, email: str, next_path: str
) -> web.Response:
    """To the check-your-inbox page; this browser holds the sign-up's binding (and where it
    started, to go back there once verified)."""
    # PASSWORD_BREACH_CHECK=warn: the inbox page says the password is a known one.
    warned = "&warn=password_breached" if result.warnings else ""
    response = redirect(request, f"/check-inbox?email={quote(email)}{warned}")
    settings = request.app[SETTINGS]
    ttl = int(auth_service.VERIFY_TTL.total_seconds())
    set_binding_cookie(response, settings, result.binding, max_age=ttl)
    if next_path:
        set_cookie(response, settings, NEXT_COOKIE, quote(next_path, safe=""), max_age=ttl)
    return response


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


async def check_inbox_post(request: web.Request, form: Form) -> web.StreamResponse:
    body = parse(EmailBody, {"email": field(form, "email").strip()})
    await rate_limit_request(request, "resend_verification", body)
    await auth_service.resend_verification(auth_of(request.app), email=body.email)
    return redirect(request, f"/check-inbox?email={quote(field(form, 'email').strip())}&resent=1")


async def check_inbox_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    email = field(form, "email").strip()
    return shown_again(
        request, "check_inbox.html", text("inbox.title"), exc, email=email, resent=False
    )


async def verify_page(request: web.Request) -> web.Response:
    return page(
        request,
        "verify.html",
        title=text("verify.title"),
        token=link_token(request),
        problem=None,
    )


async def verify_post(request: web.Request, form: Form) -> web.StreamResponse:
    body = parse(VerifyEmailBody, {"token": field(form, "token")})
    binding = request.cookies.get(BINDING_COOKIE)
    client = client_meta(request)
    services = auth_of(request.app)
    result = await auth_service.verify_email(services, body, client=client, binding=binding)
    started = safe_next(unquote(request.cookies.get(NEXT_COOKIE, "")), "")
    # A user with a second factor: the address is verified, the factor still has to come.
    response = signed_in_or_mfa(request, result, started, landing="/notifications?done=welcome")
    return _verified(request, result, response, started)


def _verified(
    request: web.Request,
    result: auth_service.Verified | auth_service.VerifiedMfaPending,
    response: web.Response,
    started: str,
) -> web.Response:
    """The sign-up's cookies go once its address is verified: its binding (when it was
    used) and where it started."""
    settings = request.app[SETTINGS]
    if result.binding_used:
        clear_binding_cookie(response, settings)
    if started:
        clear_cookie(response, settings, NEXT_COOKIE)
    return response


async def verify_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    token = field(form, "token")
    return shown_again(request, "verify.html", text("verify.title"), exc, token=token)


async def login_page(request: web.Request) -> web.Response:
    next_path = safe_next(request.query.get("next"), "")
    code = request.query.get("error")
    # A signed-in visitor moves on, unless a refusal (a provider step-up) is to be read here.
    if not code and await load_viewer(request):
        return redirect(request, next_path or "/notifications")
    oauth_error = oauth_error_text(code) if code else None
    email = request.query.get("email", "")[:320]
    return _login(request, email, next_path, notice=done_notice(request), oauth_error=oauth_error)


def _login(
    request: web.Request,
    email: str,
    next_path: str,
    *,
    notice: str | None = None,
    oauth_error: str | None = None,
    exc: AppError | None = None,
) -> web.Response:
    """The sign-in page: its form (what was typed), a notice or a refusal in words."""
    return refused_page(
        request,
        "login.html",
        text("login.title"),
        exc,
        values={"email": email} if email or exc is None else {},
        next=next_path,
        notice=notice,
        oauth_error=oauth_error,
        unverified=exc is not None and exc.code == "EMAIL_NOT_VERIFIED",
    )


def _mfa_step(request: web.Request, ticket: mfa.Ticket, next_path: str) -> web.Response:
    """To the second-factor page with the ticket, bound to this browser by a cookie."""
    query = urlencode({"ticket": ticket.ticket, **({"next": next_path} if next_path else {})})
    response = redirect(request, f"/login/mfa?{query}")
    set_cookie(
        response,
        request.app[SETTINGS],
        mfa.BINDING_COOKIE,
        ticket.binding,
        max_age=mfa.TICKET_TTL_SECONDS,
    )
    return response


async def login_post(request: web.Request, form: Form) -> web.StreamResponse:
    realm = await _home_realm(request, form)
    if realm is not None:
        return realm
    fields = {"email": field(form, "email").strip(), "password": field(form, "password")}
    body = parse(LoginBody, {**fields, "captchaToken": captcha_token(request, form)})
    await rate_limit_request(request, "login", body)
    result = await auth_service.login(auth_of(request.app), body, client=client_meta(request))
    return signed_in_or_mfa(request, result, safe_next(field(form, "next"), ""))


async def login_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    if exc.code == "SSO_REQUIRED" and form is not None:  # its provider, not an error
        sso_start = await _sso_start(request, field(form, "email").strip(), field(form, "next"))
        if sso_start is not None:
            return redirect(request, sso_start)
    if form is None:
        return _login(request, "", "", exc=exc)
    return _login(
        request, field(form, "email").strip(), safe_next(field(form, "next"), ""), exc=exc
    )


async def _home_realm(request: web.Request, form: Form) -> web.Response | None:
    """Home-realm discovery: the email first; a domain with an SSO connection goes to its
    identity provider ("Continue with single sign-on", or no password typed)."""
    if not (field(form, "sso") or not field(form, "password")):
        return None
    next_path = safe_next(field(form, "next"), "")
    sso_start = await _sso_start(request, field(form, "email").strip(), next_path)
    return None if sso_start is None else redirect(request, sso_start)


async def _sso_start(request: web.Request, email: str, next_path: str) -> str | None:
    """Where sign-in through the SSO connection of the address's domain starts, if any."""
    if "@" not in email:
        return None
    try:
        connection = await sso_service.find_connection(sso_of(request.app), email=email)
    except NotFound:
        return None
    query = {"connection": str(connection["id"]), "returnTo": next_path or "/notifications"}
    return f"/sso/start?{urlencode(query)}"


async def logout_post(request: web.Request) -> web.Response:
    await read_form(request)
    viewer = await load_viewer(request)
    if viewer is not None:
        refresh_token = request.cookies.get(REFRESH_COOKIE)
        claims = viewer.principal.claims
        await auth_service.logout(auth_of(request.app), refresh_token=refresh_token, access=claims)
    return _signed_out(request)


def _signed_out(request: web.Request) -> web.Response:
    """To the sign-in page, this browser's session cookies cleared."""
    request.pop(ISSUED, None)
    request[STALE] = True
    return redirect(request, "/login?done=signed_out")


async def logout_all_post(request: web.Request) -> web.Response:
    await read_form(request)
    viewer = await load_viewer(request)
    if viewer is not None:
        await auth_service.logout_all(auth_of(request.app), user_id=viewer.principal.user_id)
    return _signed_out(request)


async def reset_page(request: web.Request) -> web.Response:
    token = link_token(request)
    return page(
        request,
        "reset_confirm.html" if token else "reset_request.html",
        title=text("reset.confirm_title" if token else "reset.title"),
        token=token,
        sent=request.query.get("sent") == "1",
        values={"email": ""},
        problem=None,
    )


async def reset_post(request: web.Request, form: Form) -> web.StreamResponse:
    body = parse(EmailBody, {"email": field(form, "email").strip()})
    await rate_limit_request(request, "password_reset", body)
    await auth_service.request_password_reset(
        auth_of(request.app),
        email=body.email,
        captcha_token=captcha_token(request, form),
        ip=client_meta(request).ip,
    )
    return redirect(request, "/reset-password?sent=1")


async def reset_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    values = {"email": field(form, "email").strip()}
    return shown_again(
        request, "reset_request.html", text("reset.title"), exc, token="", sent=False, values=values
    )


async def reset_confirm_post(request: web.Request, form: Form) -> web.StreamResponse:
    fields = {"token": field(form, "token"), "password": field(form, "password")}
    body = parse(PasswordResetConfirmBody, fields)
    warnings = await auth_service.confirm_password_reset(
        auth_of(request.app), token=body.token, password=body.password
    )
    request[STALE] = True  # the reset ended every session, this browser's too
    done = "password_reset_breached" if warnings else "password_reset"
    return redirect(request, f"/login?done={done}")


async def reset_confirm_again(
    request: web.Request, form: Form | None, exc: AppError
) -> web.Response:
    token = field(form, "token")
    title = text("reset.confirm_title")
    return shown_again(
        request, "reset_confirm.html", title, exc, token=token, sent=False, values={}
    )


async def invitation_page(request: web.Request) -> web.Response:
    await load_viewer(request)
    return _invitation(request, link_token(request))


def _invitation(request: web.Request, token: str, exc: AppError | None = None) -> web.Response:
    """The invitation's page: its token, where it is (to come back after signing in)."""
    return refused_page(
        request,
        "invitation.html",
        text("invite.title"),
        exc,
        token=token,
        here=f"/invitations/accept?token={quote(token)}",
    )


async def invitation_post(request: web.Request, form: Form) -> web.StreamResponse:
    token = field(form, "token")
    viewer = await load_viewer(request)
    if viewer is None:
        return redirect(request, "/login?next=" + quote(f"/invitations/accept?token={token}"))
    body = parse(AcceptBody, {"token": token})
    refresh_token = request.cookies.get(REFRESH_COOKIE)
    joined = await invitations.join_by_invitation(
        accounts_of(request.app), viewer.principal, token=body.token, refresh_token=refresh_token
    )
    return await _joined(request, viewer, joined)


async def _joined(
    request: web.Request, viewer: Viewer, joined: invitations.Accepted
) -> web.StreamResponse:
    """The account just joined is this browser's active one; its members page follows."""
    await work_in(request, viewer, joined.account["id"], joined.activation)  # set: no switch
    return redirect(request, f"/accounts/{joined.account['id']}/members?done=joined")


async def invitation_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    await load_viewer(request)  # the page's header shows who is signed in
    return _invitation(request, field(form, "token"), exc)
