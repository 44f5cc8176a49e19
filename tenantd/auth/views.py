"""Auth routes: sign-up, verification, sign-in, password reset, /me, refresh, logout.

Views parse, call one service function and answer; cookies are set here.
"""

from __future__ import annotations

from aiohttp import web

from tenantd import appkeys
from tenantd.auth import service, sessions
from tenantd.auth.cookies import REFRESH_COOKIE, clear_session_cookies, set_session_cookies
from tenantd.auth.guards import invalid
from tenantd.auth.me import current_user_json
from tenantd.auth.principal import current_principal, optional_principal
from tenantd.auth.schemas import (
    AnonymousUser,
    CurrentUser,
    EmailBody,
    LoginBody,
    MfaStatus,
    PasswordResetConfirmBody,
    RefreshData,
    RegisterBody,
    SignedInUser,
    TokenBody,
    VerifiedUser,
)
from tenantd.auth.tokens import refresh_token_family
from tenantd.ops.http import rate_limit_request
from tenantd.web.json import json_response, ok
from tenantd.web.routing import Access, Routes
from tenantd.web.schemas import Empty, Message

routes = Routes("auth")


def client_meta(request: web.Request) -> service.ClientMeta:
    return service.ClientMeta(user_agent=request.headers.get("User-Agent"), ip=request.remote)


def signed_in(request: web.Request, result: service.SignedIn) -> web.Response:
    response = ok(result.body)
    set_session_cookies(response, request.app[appkeys.settings], result.tokens)
    return response


@routes.post(
    "/auth/register",
    access=Access.PUBLIC,
    body=RegisterBody,
    response=Message,
    rate_limit="register",
    summary="Sign up; a verification link is mailed (same answer for a known email)",
)
async def register(request: web.Request, body: RegisterBody) -> dict[str, str]:
    message = await service.register(
        request.app[appkeys.services],
        email=body.email,
        password=body.password,
        first_name=body.first_name,
        last_name=body.last_name,
    )
    return {"message": message}


@routes.post(
    "/api/v1/auth/resend-verification",
    access=Access.PUBLIC,
    body=EmailBody,
    response=Message,
    rate_limit="resend_verification",
    summary="Mail a fresh verification link (older links stop working)",
)
async def resend_verification(request: web.Request, body: EmailBody) -> dict[str, str]:
    message = await service.resend_verification(request.app[appkeys.services], email=body.email)
    return {"message": message}


@routes.post(
    "/auth/verify-email",
    access=Access.PUBLIC,
    body=TokenBody,
    response=VerifiedUser,
    responses={409: "DOMAIN_CLAIMED: the email domain is claimed by another live account"},
    summary="Verify the email address: provisions the account and signs in",
)
async def verify_email(request: web.Request, body: TokenBody) -> web.Response:
    result = await service.verify_email(
        request.app[appkeys.services], token=body.token, client=client_meta(request)
    )
    return signed_in(request, result)


@routes.post(
    "/api/v1/auth/login",
    access=Access.PUBLIC,
    body=LoginBody,
    response=SignedInUser,
    rate_limit="login",
    summary="Sign in with email and password",
)
async def login(request: web.Request, body: LoginBody) -> web.Response:
    result = await service.login(
        request.app[appkeys.services],
        email=body.email,
        password=body.password,
        client=client_meta(request),
    )
    return signed_in(request, result)


@routes.post(
    "/api/v1/auth/password-reset/request",
    access=Access.PUBLIC,
    body=EmailBody,
    response=Message,
    rate_limit="password_reset",
    summary="Mail a password reset link (same answer whether or not the email exists)",
)
async def password_reset_request(request: web.Request, body: EmailBody) -> dict[str, str]:
    message = await service.request_password_reset(request.app[appkeys.services], email=body.email)
    return {"message": message}


@routes.post(
    "/api/v1/auth/password-reset/confirm",
    access=Access.PUBLIC,
    body=PasswordResetConfirmBody,
    response=Empty,
    summary="Set a new password with a reset token; ends every session of the user",
)
async def password_reset_confirm(
    request: web.Request, body: PasswordResetConfirmBody
) -> dict[str, str]:
    await service.confirm_password_reset(
        request.app[appkeys.services], token=body.token, password=body.password
    )
    return {}


@routes.get(
    "/api/v1/users/me",
    access=Access.TRY,
    response=CurrentUser | AnonymousUser,
    wrapped=False,
    summary="Current user (user null when anonymous)",
)
async def me(request: web.Request) -> web.Response:
    principal = optional_principal(request)
    if principal is None:
        return json_response({"user": None})
    services = request.app[appkeys.services]
    body = await current_user_json(services.db, services.context_cache, principal)
    if body is None:
        raise invalid()
    return web.Response(body=body, content_type="application/json")


@routes.post(
    "/api/v1/auth/refresh",
    access=Access.TRY,
    response=RefreshData,
    summary="Rotate the refresh cookie and issue a new access token (user null without one)",
)
async def refresh(request: web.Request) -> web.Response:
    raw = request.cookies.get(REFRESH_COOKIE)
    if not raw:
        # Nothing to refresh: the anonymous branch of tryAuth.
        return ok({"user": None})
    services = request.app[appkeys.services]
    # Limited per IP and per session family (named by the token, checked by its tag).
    family = refresh_token_family(services.settings.secret_key, raw)
    await rate_limit_request(request, "refresh", None, session=str(family) if family else None)
    result = await service.refresh_session(services, refresh_token=raw, client=client_meta(request))
    return signed_in(request, result)


@routes.get("/api/v1/auth/mfa/status", access=Access.TRY, response=MfaStatus, summary="MFA status")
async def mfa_status(request: web.Request) -> dict[str, bool]:
    # MFA enrolment is not built yet: nobody has it, anonymous included.
    optional_principal(request)
    return {"enabled": False}


@routes.post("/api/v1/auth/logout", response=Empty, summary="End this session")
async def logout(request: web.Request) -> web.Response:
    principal = current_principal(request)
    services = request.app[appkeys.services]
    claims = principal.claims
    async with services.db.transaction() as conn:
        await sessions.revoke_session(
            conn,
            services.settings,
            refresh_token=request.cookies.get(REFRESH_COOKIE),
            access=claims,
        )
    response = ok({})
    clear_session_cookies(response, services.settings)
    return response


@routes.post("/api/v1/auth/logout-all", response=Empty, summary="End every session of the user")
async def logout_all(request: web.Request) -> web.Response:
    principal = current_principal(request)
    services = request.app[appkeys.services]
    async with services.db.connection() as conn:
        await sessions.revoke_all(conn, user_id=principal.user_id)
    response = ok({})
    clear_session_cookies(response, services.settings)
    return response
