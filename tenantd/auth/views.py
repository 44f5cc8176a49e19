"""Auth routes: sign-up, verification, sign-in, passwords, /me, refresh, logout.

Views parse, call one service function and answer; cookies are set here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tenantd.accounts.me import current_user_json
from tenantd.audit import cursors
from tenantd.auth import email_code, service
from tenantd.auth.domain import auth_of
from tenantd.auth.schemas import (
    REAUTH_REQUIRED,
    AccountRef,
    AnonymousUser,
    CaptchaEmailBody,
    CurrentUser,
    EmailBody,
    EmailCodeVerifyBody,
    LoginBody,
    MfaStatus,
    PasswordChangeBody,
    PasswordChanged,
    PasswordReset,
    PasswordResetConfirmBody,
    RefreshData,
    RegisterBody,
    RegisteredOut,
    RevokedSessions,
    SecurityEventOut,
    SecurityEventPage,
    SecurityEventsQuery,
    SessionOut,
    SignedInUser,
    UserOut,
    VerifiedUser,
    VerifyEmailBody,
)
from tenantd.email.templates import best_locale
from tenantd.identity import browser
from tenantd.identity.cookies import (
    BINDING_COOKIE,
    REFRESH_COOKIE,
    clear_binding_cookie,
    clear_session_cookies,
    set_binding_cookie,
    set_cookie,
)
from tenantd.identity.guards import invalid
from tenantd.mfa import service as mfa
from tenantd.mfa.domain import mfa_of
from tenantd.mfa.schemas import MfaChallengeOut, MfaStatusOut
from tenantd.principal import current_principal, optional_principal
from tenantd.settings import SETTINGS, Settings
from tenantd.web.json import JsonResponse, dumps, ok
from tenantd.web.ratelimit import RequestLimits, request_ip
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import Empty, Message
from tenantd.web.spec import Access, Routes

ROUTES = Routes("auth")

CAPTCHA_FAILED = "CAPTCHA_FAILED: the bot check is missing or refused"
MAGIC_LINK_OFF = "NOT_FOUND: MAGIC_LINK_ENABLED is off"
# A mail to an address: anyone may ask, and the message is the same whether or not the
# address is known.
MAIL_TO_ADDRESS: dict[str, Any] = {"access": Access.PUBLIC, "response": Message}
# A sign-in: anyone may try; a session, or the challenge of a user with a second factor.
SIGN_IN: dict[str, Any] = {"access": Access.PUBLIC, "response": SignedInUser | MfaChallengeOut}
# Anonymous is a legitimate state here, and a session that owes its second factor is served.
ANY_SESSION: dict[str, Any] = {"access": Access.TRY, "mfa_exempt": True}
# Signing out: served to a session that owes its second factor too; an empty answer.
SIGN_OUT: dict[str, Any] = {"response": Empty, "mfa_exempt": True}


def client_meta(request: web.Request) -> service.ClientMeta:
    # The client's address as the rate limiter and the pages see it (X-Forwarded-For only
    # from TENANTD_TRUSTED_PROXIES): bot checks count failed logins per client by it.
    return browser.client_meta(request, ip=request_ip(request))


def signed_in(request: web.Request, result: service.SignedIn | service.Verified) -> web.Response:
    """Answer with the signed-in user (and the verified account) and set the session cookies."""
    data: VerifiedUser | SignedInUser | RefreshData | dict[str, object]
    if isinstance(result, service.Verified):
        data = VerifiedUser(
            user=UserOut.of(result.user),
            account=AccountRef(id=result.account["id"], name=result.account["name"]),
            has_password_login=result.has_password_login,
        )
    elif result.user is None:
        data = RefreshData(user=None)
    else:
        data = {"user": UserOut.json_of(result.user)}  # SignedInUser, without the models
        if result.warnings:
            data["warnings"] = list(result.warnings)  # a password change's breach warning
    response = ok(data)
    settings = request.app[SETTINGS]
    browser.set_signed_in_cookies(response, settings, result.tokens, result.device)
    return response


@ROUTES.post(
    "/auth/register",
    access=Access.PUBLIC,
    response=RegisteredOut,
    responses={
        422: "VALIDATION_ERROR (password_breached under PASSWORD_BREACH_CHECK=block); "
        + CAPTCHA_FAILED
    },
    rate_limit="register",
    summary="Sign up; a verification link is mailed (same answer for a known email)",
)
async def register(request: web.Request, body: RegisterBody) -> web.Response:
    locale = best_locale(request.headers.get("Accept-Language"))
    services = auth_of(request.app)
    result = await service.register(services, body, locale=locale, ip=request_ip(request))
    answer = RegisteredOut(message=result.message, warnings=list(result.warnings) or None)
    response = ok(answer.model_dump(by_alias=True, exclude_none=True))
    ttl = int(service.VERIFY_TTL.total_seconds())
    set_binding_cookie(response, request.app[SETTINGS], result.binding, max_age=ttl)
    return response


@ROUTES.post(
    "/api/v1/auth/resend-verification",
    **MAIL_TO_ADDRESS,
    rate_limit="resend_verification",
    summary="Mail one more verification link (earlier links keep working)",
)
async def resend_verification(request: web.Request, body: EmailBody) -> Message:
    message = await service.resend_verification(auth_of(request.app), email=body.email)
    return Message(message=message)


@ROUTES.post(
    "/auth/verify-email",
    access=Access.PUBLIC,
    response=VerifiedUser | MfaChallengeOut,
    responses={
        409: "DOMAIN_CLAIMED: the email domain is claimed by another live account",
        422: "VALIDATION_ERROR: bad link, or `password` is not the one chosen at sign-up",
    },
    summary="Verify the email address: provisions the account and signs in (a user with a"
    " second factor gets {mfaRequired, methods, ticket} instead); installs the sign-up's"
    " password only in its browser or given that password",
)
async def verify_email(request: web.Request, body: VerifyEmailBody) -> web.Response:
    binding = request.cookies.get(BINDING_COOKIE)
    client = client_meta(request)
    result = await service.verify_email(auth_of(request.app), body, client=client, binding=binding)
    response = signed_in_or_mfa(request, result)
    if result.binding_used:
        clear_binding_cookie(response, request.app[SETTINGS])
    return response


@ROUTES.post(
    "/api/v1/auth/login",
    **SIGN_IN,
    responses={422: "CAPTCHA_FAILED: repeated failures; send captchaToken"},
    rate_limit="login",
    summary="Sign in with email and password; a user with a second factor gets"
    " {mfaRequired, methods, ticket} and no session cookie (finish with /api/v1/auth/mfa/verify)",
)
async def login(request: web.Request, body: LoginBody) -> web.Response:
    return await sign_in(request, service.login, body)


# A sign-in by one means (password, email code): `(services, body, *, client)`.
SignInAttempt = Callable[..., Awaitable[service.SignedIn | service.MfaPending]]


async def sign_in(request: web.Request, attempt: SignInAttempt, body: object) -> web.Response:
    """Try a sign-in for this client: a session, or the challenge of a second factor."""
    result = await attempt(auth_of(request.app), body, client=client_meta(request))
    return signed_in_or_mfa(request, result)


def signed_in_or_mfa(
    request: web.Request,
    result: service.SignedIn | service.MfaPending | service.Verified | service.VerifiedMfaPending,
) -> web.Response:
    """A session (cookies set), or the MFA challenge of a user with a second factor."""
    if isinstance(result, service.MfaPending | service.VerifiedMfaPending):
        return mfa_challenge(request.app[SETTINGS], result.ticket)
    return signed_in(request, result)


@ROUTES.post(
    "/api/v1/auth/email-code",
    **MAIL_TO_ADDRESS,
    responses={404: MAGIC_LINK_OFF, 422: CAPTCHA_FAILED},
    rate_limit="email_code",
    summary="Mail a 6-digit sign-in code and a magic link (same answer for every address)",
)
async def email_code_request(request: web.Request, body: CaptchaEmailBody) -> Message:
    message = await email_code.request_code(
        auth_of(request.app),
        email=body.email,
        client=client_meta(request),
        captcha_token=body.captcha_token,
    )
    return Message(message=message)


@ROUTES.post(
    "/api/v1/auth/email-code/verify",
    **SIGN_IN,
    responses={
        404: MAGIC_LINK_OFF,
        409: "DOMAIN_CLAIMED: a first sign-in on a domain another account claimed",
        422: "VALIDATION_ERROR: wrong, expired, used or ended code (five wrong codes end it)",
    },
    rate_limit="email_code_verify",
    summary="Sign in with {email, code} (or the link's {token}); a user with a second factor"
    " gets {mfaRequired, methods, ticket} as after a password",
)
async def email_code_verify(request: web.Request, body: EmailCodeVerifyBody) -> web.Response:
    return await sign_in(request, email_code.verify, body)


def mfa_challenge(settings: Settings, ticket: mfa.Ticket) -> web.Response:
    """The ticket in the answer, its browser binding in a cookie; no session cookie."""
    response = ok(MfaChallengeOut(methods=ticket.methods, ticket=ticket.ticket))
    set_cookie(
        response, settings, mfa.BINDING_COOKIE, ticket.binding, max_age=mfa.TICKET_TTL_SECONDS
    )
    return response


@ROUTES.post(
    "/api/v1/auth/password-reset/request",
    **MAIL_TO_ADDRESS,
    responses={422: CAPTCHA_FAILED},
    rate_limit="password_reset",
    summary="Mail a password reset link (same answer whether or not the email exists)",
)
async def password_reset_request(request: web.Request, body: CaptchaEmailBody) -> Message:
    message = await service.request_password_reset(
        auth_of(request.app),
        email=body.email,
        captcha_token=body.captcha_token,
        ip=request_ip(request),
    )
    return Message(message=message)


@ROUTES.post(
    "/api/v1/auth/password-reset/confirm",
    access=Access.PUBLIC,
    response=PasswordReset,
    summary="Set a new password with a reset token; ends every session of the user",
)
async def password_reset_confirm(
    request: web.Request, body: PasswordResetConfirmBody
) -> dict[str, object]:
    warnings = await service.confirm_password_reset(
        auth_of(request.app), token=body.token, password=body.password, client=client_meta(request)
    )
    return PasswordReset(warnings=list(warnings) or None).model_dump(
        by_alias=True, exclude_none=True
    )


@ROUTES.post(
    "/api/v1/auth/password",
    response=PasswordChanged,
    responses={
        401: "INVALID_CREDENTIALS: currentPassword is wrong",
        403: REAUTH_REQUIRED,
        422: "VALIDATION_ERROR: newPassword invalid, or currentPassword missing",
        429: "RATE_LIMITED: too many attempts (the login limit)",
    },
    rate_limit="login",
    summary="Set or change the password; ends every other session, keeps this one",
)
async def change_password(request: web.Request, body: PasswordChangeBody) -> web.Response:
    result = await service.change_password(
        auth_of(request.app), current_principal(request), body, client=client_meta(request)
    )
    return signed_in(request, result)


# The anonymous answer never changes: built once (a model and its dump were ~10% of it).
ANONYMOUS_ME = dumps(AnonymousUser())


@ROUTES.get(
    "/api/v1/users/me",
    **ANY_SESSION,
    response=CurrentUser | AnonymousUser,
    wrapped=False,
    summary="Current user (user null when anonymous)",
)
async def me(request: web.Request) -> web.Response:
    principal = optional_principal(request)
    if principal is None:
        return JsonResponse(ANONYMOUS_ME)
    services = auth_of(request.app)
    body = await current_user_json(services.db, services.accounts.me_cache, principal)
    if body is None:
        raise invalid()
    return JsonResponse(body)


@ROUTES.post(
    "/api/v1/auth/refresh",
    **ANY_SESSION,
    response=RefreshData,
    summary="Rotate the refresh cookie and issue a new access token (user null without one)",
)
async def refresh(request: web.Request) -> web.Response:
    result = await service.refresh(
        auth_of(request.app),
        refresh_token=request.cookies.get(REFRESH_COOKIE),
        principal=optional_principal(request),
        client=client_meta(request),
        limits=RequestLimits(request, "refresh"),  # counted in the renewal's own statement
    )
    return ok(RefreshData(user=None)) if result is None else signed_in(request, result)


@ROUTES.get(
    "/api/v1/auth/mfa/status",
    **ANY_SESSION,
    response=MfaStatusOut | MfaStatus,
    summary="MFA status: {enabled, methods, recoveryCodesRemaining}; anonymous: {enabled: false}",
)
async def mfa_status(request: web.Request) -> MfaStatus | dict[str, object]:
    principal = optional_principal(request)
    if principal is None:
        return MfaStatus(enabled=False)
    return await mfa.status(mfa_of(request.app), principal.user_id)


@ROUTES.post("/api/v1/auth/logout", **SIGN_OUT, summary="End this session")
async def logout(request: web.Request) -> web.Response:
    services = auth_of(request.app)
    refresh_token = request.cookies.get(REFRESH_COOKIE)
    claims = current_principal(request).claims
    await service.logout(
        services, refresh_token=refresh_token, access=claims, client=client_meta(request)
    )
    response = ok(Empty())
    clear_session_cookies(response, services.settings)
    return response


@ROUTES.post("/api/v1/auth/logout-all", **SIGN_OUT, summary="End every session of the user")
async def logout_all(request: web.Request) -> web.Response:
    principal = current_principal(request)
    services = auth_of(request.app)
    await service.logout_all(services, user_id=principal.user_id, client=client_meta(request))
    response = ok(Empty())
    clear_session_cookies(response, services.settings)
    return response


# -- sessions the user can see and end; the security log --------------------------------------


@ROUTES.get(
    "/api/v1/auth/sessions",
    summary="My live sessions (one per sign-in), the one of this request marked current",
)
async def list_sessions(request: web.Request) -> list[SessionOut]:
    principal = current_principal(request)
    current = principal.session_id
    rows = await service.list_sessions(
        auth_of(request.app), user_id=principal.user_id, current=current
    )
    return [SessionOut.of(row, current) for row in rows]


@ROUTES.delete(
    "/api/v1/auth/sessions/{id}",
    response=Empty,
    responses={404: "NOT_FOUND: not a live session of the caller's"},
    summary="End one of my sessions: its tokens stop working at once on every instance",
)
async def end_session(request: web.Request) -> web.Response:
    principal = current_principal(request)
    services = auth_of(request.app)
    session_id = path_uuid(request, "id")
    await service.end_session(
        services, user_id=principal.user_id, session_id=session_id, client=client_meta(request)
    )
    response = ok(Empty())
    if session_id == principal.session_id:
        clear_session_cookies(response, services.settings)  # this browser signed itself out
    return response


@ROUTES.post(
    "/api/v1/auth/sessions/revoke-others",
    summary="End every session of mine except this one",
)
async def revoke_other_sessions(request: web.Request) -> RevokedSessions:
    principal = current_principal(request)
    count = await service.end_other_sessions(
        auth_of(request.app),
        user_id=principal.user_id,
        current=principal.session_id,
        client=client_meta(request),
    )
    return RevokedSessions(revoked=count)


@ROUTES.get(
    "/api/v1/users/me/security-events",
    summary="My security log (sign-ins, sign-outs, password and session changes), newest first",
)
async def security_events(request: web.Request, query: SecurityEventsQuery) -> SecurityEventPage:
    principal = current_principal(request)
    rows, last_id = await service.security_events(
        auth_of(request.app),
        user_id=principal.user_id,
        before_id=cursors.decode(query.cursor),
        limit=query.limit,
    )
    items = [SecurityEventOut.of(row) for row in rows]
    return SecurityEventPage(items=items, next_cursor=cursors.encode(last_id))
