"""Session routes: /me, refresh, MFA status, logout, logout-all."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd import appkeys
from tenantd.auth import sessions
from tenantd.auth.cookies import REFRESH_COOKIE, clear_session_cookies, set_session_cookies
from tenantd.auth.guards import invalid
from tenantd.auth.me import current_user
from tenantd.auth.principal import current_principal, optional_principal
from tenantd.auth.queries import user_by_id
from tenantd.auth.schemas import AnonymousUser, CurrentUser, MfaStatus, RefreshData
from tenantd.auth.tokens import AccessClaims
from tenantd.errors import Unauthorized
from tenantd.web.json import json_response, ok
from tenantd.web.routing import Access, Routes
from tenantd.web.schemas import Empty

routes = Routes("auth")


def client_meta(request: web.Request) -> dict[str, str | None]:
    return {"user_agent": request.headers.get("User-Agent"), "ip": request.remote}


def user_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "email": row["email"],
        "firstName": row["first_name"],
        "lastName": row["last_name"],
        "emailVerifiedAt": row["email_verified_at"],
    }


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
    async with services.db.connection() as conn:
        body = await current_user(conn, principal)
    if body is None:
        raise invalid()
    return json_response(body)


@routes.post(
    "/api/v1/auth/refresh",
    access=Access.TRY,
    response=RefreshData,
    summary="Rotate the refresh cookie and issue a new access token",
)
async def refresh(request: web.Request) -> web.Response:
    raw = request.cookies.get(REFRESH_COOKIE)
    if not raw:
        raise Unauthorized("invalid_session", "No refresh session")
    services = request.app[appkeys.services]
    async with services.db.connection() as conn:
        tokens = await sessions.rotate(
            conn, services.settings, refresh_token=raw, **client_meta(request)
        )
        user = await user_by_id(conn, tokens.access.user_id)
    response = ok({"user": user_json(user) if user else None})
    set_session_cookies(response, services.settings, tokens)
    return response


@routes.get("/api/v1/auth/mfa/status", access=Access.TRY, response=MfaStatus, summary="MFA status")
async def mfa_status(request: web.Request) -> dict[str, bool]:
    # MFA enrolment is not built yet: nobody has it, anonymous included.
    optional_principal(request)
    return {"enabled": False}


@routes.post("/api/v1/auth/logout", response=Empty, summary="End this session")
async def logout(request: web.Request) -> web.Response:
    principal = current_principal(request)
    services = request.app[appkeys.services]
    claims = AccessClaims(
        user_id=principal.user_id,
        account_id=principal.account_id,
        jti=principal.jti,
        issued_at=principal.issued_at,
        expires_at=principal.expires_at,
    )
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
