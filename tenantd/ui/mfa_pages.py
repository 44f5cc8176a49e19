"""Pages of two-factor authentication: the second step of a sign-in (/login/mfa), enrolment
on /account (authenticator app, recovery codes, passkeys), the "confirm it's you" step-up,
the email-change links and the account's MFA requirement. Every form calls the same
services as the JSON routes."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tenantd.accounts import service as accounts
from tenantd.accounts.domain import accounts_of
from tenantd.auth import email_change, security_undo
from tenantd.auth.domain import auth_of
from tenantd.auth.schemas import EmailChangeBody
from tenantd.errors import AppError, NotFound, ValidationFailed
from tenantd.identity.cookies import clear_cookie
from tenantd.identity.domain import identity_of
from tenantd.identity.stepup import reauth_methods, reauth_providers
from tenantd.mfa import passkeys, proof
from tenantd.mfa import service as mfa
from tenantd.mfa.domain import mfa_of
from tenantd.mfa.schemas import CodeBody, ReauthBody, RenameBody, VerifyBody
from tenantd.settings import SETTINGS
from tenantd.ui.account_pages import profile
from tenantd.ui.forms import (
    Form,
    Problem,
    again_showing,
    field,
    link_token,
    parse,
    problem,
    problem_page,
    refused_page,
    safe_next,
)
from tenantd.ui.render import redirect
from tenantd.ui.session import ACCESS, DEVICE, ISSUED, STALE, Viewer, client_meta, load_viewer
from tenantd.ui.strings import text
from tenantd.web.json import loads_bounded
from tenantd.web.ratelimit import rate_limit_request
from tenantd.web.routing import path_uuid

# -- /login/mfa: the second step of a sign-in -------------------------------------------------


def _ticket_of(value: str | None) -> str:
    return (value or "")[:512]


async def _mfa_page(
    request: web.Request,
    *,
    ticket: str,
    next_path: str,
    issue: Problem | None = None,
    methods: list[str] | None = None,
    recovery: bool = False,
) -> web.Response:
    if methods is None:
        methods = []
        try:
            row = await mfa.live_ticket(
                mfa_of(request.app),
                ticket=ticket,
                binding=request.cookies.get(mfa.BINDING_COOKIE),
            )
            methods = (await mfa.status(mfa_of(request.app), row["user_id"]))["methods"]
        except AppError:
            issue = issue or Problem(message=text("mfa.ticket_expired"), status=401)
    return problem_page(
        request,
        "login_mfa.html",
        text("mfa.title"),
        issue,
        ticket=ticket,
        next=next_path,
        methods=methods,
        recovery=recovery,
        live=bool(methods),
    )


async def login_mfa_page(request: web.Request) -> web.Response:
    return await _mfa_page(
        request,
        ticket=_ticket_of(request.query.get("ticket")),
        next_path=safe_next(request.query.get("next"), ""),
    )


async def login_mfa_post(request: web.Request, form: Form) -> web.Response:
    body = parse(VerifyBody, _second_step(form))
    await rate_limit_request(request, "mfa", body)
    binding = request.cookies.get(mfa.BINDING_COOKIE)
    client = client_meta(request)
    done = await proof.second_factor(mfa_of(request.app), body, binding=binding, client=client)
    return _mfa_signed_in(request, done, safe_next(field(form, "next"), ""))


def _second_step(form: Form) -> dict[str, Any]:
    """The VerifyBody fields of the second-step form: the ticket and a code or a recovery code."""
    ticket = _ticket_of(field(form, "ticket"))
    if recovery_code := field(form, "recoveryCode").strip():
        return {"ticket": ticket, "recoveryCode": recovery_code}
    return {"ticket": ticket, "totp": field(form, "totp").replace(" ", "")}


async def login_mfa_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    """The second-step page again: a wrong or malformed code, or an expired ticket, in words."""
    return await _mfa_page(
        request,
        ticket=_ticket_of(field(form, "ticket")),
        next_path=safe_next(field(form, "next"), ""),
        issue=code_problem(exc, ticket=True),
        recovery=bool(field(form, "recoveryCode").strip()),
    )


def code_problem(exc: AppError, *, ticket: bool = False) -> Problem:
    """A refused code in words: a wrong or malformed one; with a `ticket` (the second step of
    a sign-in), an expired ticket too (a malformed ticket keeps its own words)."""
    issue = problem(exc)
    malformed = exc.code == "VALIDATION_ERROR" and not (ticket and issue.fields.get("ticket"))
    if exc.code == "INVALID_CREDENTIALS" or malformed:
        return Problem(message=text("mfa.wrong_code"), status=exc.status)
    if ticket and exc.code == "UNAUTHORIZED":
        return Problem(message=text("mfa.ticket_expired"), status=exc.status)
    return issue


def _mfa_signed_in(request: web.Request, done: mfa.Completed, next_path: str) -> web.Response:
    """Signed in: the session (and device) cookies, the ticket's binding cookie cleared."""
    request[ISSUED] = done.tokens
    if done.device is not None:
        request[DEVICE] = done.device
    response = redirect(request, next_path or safe_next(done.return_to, "/notifications"))
    clear_cookie(response, request.app[SETTINGS], mfa.BINDING_COOKIE)
    return response


# -- /account: enrolment ----------------------------------------------------------------------


account_again = again_showing(profile)  # /account, the refused form's problem in words


async def totp_setup_post(request: web.Request, viewer: Viewer, form: Form) -> web.Response:
    setup = await mfa.setup_totp(mfa_of(request.app), viewer.principal)
    return await profile(
        request, viewer, totp_setup={"secret": setup.secret, "qr_svg": setup.qr_svg}
    )


async def totp_confirm_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    body = parse(CodeBody, {"code": field(form, "code").replace(" ", "")})
    codes = await mfa.confirm_totp(mfa_of(request.app), viewer.principal, code=body.code)
    return await profile(request, viewer, recovery_codes=codes)


async def totp_confirm_again(
    request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
) -> web.Response:
    """The enrolment again: a wrong or malformed code, in words."""
    issue = code_problem(exc)
    return await profile(request, viewer, issue=issue, totp_setup={"pending": True})


async def totp_disable_post(request: web.Request, viewer: Viewer, form: Form) -> web.Response:
    await mfa.disable_totp(mfa_of(request.app), viewer.principal)
    return redirect(request, "/account?done=totp_off#mfa")


async def recovery_post(request: web.Request, viewer: Viewer, form: Form) -> web.Response:
    codes = await mfa.regenerate_recovery_codes(mfa_of(request.app), viewer.principal)
    return await profile(request, viewer, recovery_codes=codes)


async def passkey_rename_post(request: web.Request, viewer: Viewer, form: Form) -> web.Response:
    body = parse(RenameBody, {"name": field(form, "name").strip()})
    await passkeys.rename(
        mfa_of(request.app), viewer.principal.user_id, path_uuid(request, "pid"), body.name
    )
    return redirect(request, "/account?done=passkey_renamed#mfa")


async def passkey_delete_post(request: web.Request, viewer: Viewer, form: Form) -> web.Response:
    await passkeys.delete(mfa_of(request.app), viewer.principal, path_uuid(request, "pid"))
    return redirect(request, "/account?done=passkey_removed#mfa")


# -- "confirm it's you" (step-up) -------------------------------------------------------------

_MEMBERS = re.compile(r"^/accounts/([0-9a-fA-F-]{36})/")


def back_page(path: str) -> str:
    """The page a refused form was on (the step-up returns there)."""
    path = safe_next(path, "/account")
    found = _MEMBERS.match(path)
    if found:
        return f"/accounts/{found.group(1)}/members"
    if path.startswith("/account/"):
        return "/account"
    return path.split("?", 1)[0].split("#", 1)[0]


async def reauth_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    if provider := field(form, "provider"):
        return await _reauth_at_provider(request, viewer, provider, _back(form))
    body = parse(ReauthBody, _reauth_fields(form))
    await rate_limit_request(request, "mfa", body)
    device = client_meta(request).device
    done = await proof.step_up(mfa_of(request.app), viewer.principal, body, device=device)
    request[ACCESS] = (done.access_token, done.claims)
    return redirect(request, _reauthed(_back(form)))


def _back(form: Form | None) -> str:
    """Where the step-up returns: the page its form was on."""
    return back_page(field(form, "back"))


def _reauthed(back: str) -> str:
    return f"{back}{'&' if '?' in back else '?'}done=reauthed"


async def reauth_again(
    request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
) -> web.Response:
    """/account with the step-up form again: what went wrong, and the ways to confirm."""
    issue = code_problem(exc)
    issue.code = "REAUTH_REQUIRED"
    issue.methods, issue.providers = await _reauth_methods(request, viewer)
    return await profile(request, viewer, issue=issue, reauth_back=_back(form))


def _reauth_fields(form: Any) -> dict[str, Any]:
    """The one proof a step-up form posted: a password, a code, or the passkey assertion
    (JSON, filled in by passkeys.js)."""
    if password := field(form, "password"):
        return {"password": password}
    if passkey := field(form, "passkey"):
        try:
            return {"passkey": loads_bounded(passkey)}
        except ValidationFailed:  # malformed, or nested too deep: never walked
            return {"passkey": passkey}  # refused by the body model, in words
    return {"totp": field(form, "totp").replace(" ", "")}


async def _reauth_at_provider(
    request: web.Request, viewer: Viewer, provider: str, back: str
) -> web.StreamResponse:
    """ "Confirm with <provider>": off to the provider (prompt=login); its callback comes back
    to the page with a fresh auth_time (GET /api/v1/auth/oauth/{provider}/reauth)."""
    _, providers = await _reauth_methods(request, viewer)
    if provider not in providers:
        raise NotFound()
    query = urlencode({"returnTo": _reauthed(back)})
    return redirect(request, f"/api/v1/auth/oauth/{provider}/reauth?{query}")


async def _reauth_methods(request: web.Request, viewer: Viewer) -> tuple[list[str], list[str]]:
    identity = identity_of(request.app)
    async with identity.db.connection() as conn:
        providers = await reauth_providers(conn, identity.settings, viewer.principal.user_id)
        methods = await reauth_methods(conn, viewer.principal.user_id, providers=providers)
    return methods, providers


# -- email change -----------------------------------------------------------------------------


def _link_problem(exc: AppError) -> Problem:
    """A refused email-change link in words (its token is a hidden field, not a box to fix)."""
    issue = problem(exc)
    if "token" in issue.fields:
        return Problem(message=text("email.bad_link"), status=exc.status, code=exc.code)
    return issue


def _email_link_page(
    request: web.Request,
    mode: str,
    *,
    token: str = "",
    new_email: str | None = None,
    refused: AppError | None = None,
    outcome: str | None = None,
) -> web.Response:
    """The page of an email-change link (`confirm`, `cancel`, `cancelled` with its
    `outcome`); a refused link says so in words, with the refusal's status."""
    title = text("email.confirm_title" if mode == "confirm" else "email.cancel_title")
    return refused_page(
        request,
        "email_change.html",
        title,
        refused,
        words=_link_problem,
        mode=mode,
        token=token,
        new_email=new_email,
        outcome=outcome,
    )


async def email_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    body = parse(EmailChangeBody, {"newEmail": field(form, "newEmail").strip()})
    await email_change.request_change(
        auth_of(request.app), viewer.principal, new_email=str(body.new_email)
    )
    return redirect(request, "/account?done=email_sent")


email_again = again_showing(profile, new_email="newEmail")


async def confirm_email_page(request: web.Request) -> web.StreamResponse:
    token = link_token(request)
    viewer = await load_viewer(request)
    if viewer is None:
        return redirect(request, "/login?" + urlencode({"next": request.path_qs}))
    new_email = await email_change.pending_new_email(auth_of(request.app), token=token)
    return _email_link_page(request, "confirm", token=token, new_email=new_email)


async def confirm_email_post(
    request: web.Request, viewer: Viewer, form: Form
) -> web.StreamResponse:
    await email_change.confirm_change(
        auth_of(request.app), user_id=viewer.principal.user_id, token=_token(form)
    )
    return redirect(request, "/account?done=email_changed")


def _token(form: Form | None) -> str:
    """A link's token, posted back by its page's button."""
    return field(form, "token")[:4000]


async def confirm_email_again(
    request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
) -> web.Response:
    return _email_link_page(request, "confirm", token=_token(form), refused=exc)


async def cancel_email_page(request: web.Request) -> web.Response:
    return _email_link_page(request, "cancel", token=link_token(request))


async def cancel_email_post(request: web.Request, form: Form) -> web.Response:
    cancelled = await email_change.cancel_change(auth_of(request.app), token=_token(form))
    request[STALE] = True  # every session of the user ended, this browser's too
    outcome = "restored" if cancelled.restored else "kept" if cancelled.kept else "not_restored"
    return _email_link_page(request, "cancelled", outcome=outcome)


async def cancel_email_again(
    request: web.Request, form: Form | None, exc: AppError
) -> web.Response:
    return _email_link_page(request, "cancel", token=_token(form), refused=exc)


# -- "This wasn't me" of a sensitive action ---------------------------------------------------


def _undo_page(
    request: web.Request, mode: str, *, token: str = "", refused: AppError | None = None
) -> web.Response:
    return refused_page(
        request,
        "wasnt_me.html",
        text("undo.title"),
        refused,
        words=_link_problem,
        mode=mode,
        token=token,
    )


async def wasnt_me_page(request: web.Request) -> web.Response:
    """The link of a security notice: a button (mail scanners open links; only a post acts)."""
    return _undo_page(request, "ask", token=link_token(request))


async def wasnt_me_post(request: web.Request, form: Form) -> web.Response:
    await security_undo.undo(auth_of(request.app), token=_token(form))
    request[STALE] = True  # every session of the user ended, this browser's too
    return _undo_page(request, "done")


async def wasnt_me_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    return _undo_page(request, "ask", token=_token(form), refused=exc)


# -- the account's MFA requirement ------------------------------------------------------------


async def require_mfa_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    account_id = path_uuid(request, "id")
    required = field(form, "requireMfa") == "true"
    await accounts.update_account(
        accounts_of(request.app), viewer.principal, account_id, name=None, require_mfa=required
    )
    done = "mfa_required" if required else "mfa_not_required"
    return redirect(request, f"/accounts/{account_id}/members?done={done}")
