"""Who is looking at a page: the session cookies checked like the API guard does, with one
server-side refresh when only the refresh cookie is left (so pages work without JavaScript
after the 15-minute access token is gone)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tenantd.accounts.domain import accounts_of
from tenantd.accounts.me import current_user
from tenantd.auth import service as auth_service
from tenantd.auth.domain import auth_of
from tenantd.errors import AppError
from tenantd.identity import permissions
from tenantd.identity.cookies import (
    AUTH_COOKIE,
    DEVICE_COOKIE,
    REFRESH_COOKIE,
    clear_session_cookies,
    set_access_cookie,
    set_device_cookie,
    set_session_cookies,
)
from tenantd.identity.devices import DEVICE_COOKIE_MAX_AGE
from tenantd.identity.guards import authenticate, recheck
from tenantd.identity.sessions import IssuedTokens
from tenantd.notifications.channels import in_app
from tenantd.notifications.domain import notifications_of
from tenantd.principal import PRINCIPAL, AccessClaims, Principal
from tenantd.settings import Settings
from tenantd.web.ratelimit import request_ip

log = logging.getLogger(__name__)


@dataclass
class Viewer:
    """The signed-in user of a page and their /me body (user, account, role, memberships)."""

    principal: Principal
    me: dict[str, Any]
    unread: int = 0

    @property
    def email(self) -> str:
        return str(self.me["user"]["email"])

    @property
    def account(self) -> dict[str, Any] | None:
        account: dict[str, Any] | None = self.me["account"]
        return account

    @property
    def role(self) -> str | None:
        role: str | None = self.me["role"]
        return role

    def can(self, permission: str) -> bool:
        """Whether the viewer's role in the active account holds `permission` (a control
        shown by it is still checked by the action)."""
        return permissions.allowed(self.principal.role, self.principal.role_permissions, permission)


VIEWER: web.RequestKey[Viewer | None] = web.RequestKey("ui_viewer")
# Tokens a page issued (refresh, sign-in, switch): set on whatever response the page sends.
ISSUED: web.RequestKey[IssuedTokens] = web.RequestKey("ui_issued_tokens")
# A new access token only (switch, create, accept, leave): the refresh cookie stays.
ACCESS: web.RequestKey[tuple[str, AccessClaims]] = web.RequestKey("ui_issued_access")
# A sign-in's device cookie value (the browser's id for the new sign-in mail): set it again.
DEVICE: web.RequestKey[str] = web.RequestKey("ui_device")
# The session cookies are stale and could not be refreshed: clear them.
STALE: web.RequestKey[bool] = web.RequestKey("ui_stale_session")


def client_meta(request: web.Request) -> auth_service.ClientMeta:
    return auth_service.ClientMeta(
        user_agent=request.headers.get("User-Agent"),
        ip=request_ip(request),
        device=request.cookies.get(DEVICE_COOKIE),
    )


async def _principal(request: web.Request) -> Principal | None:
    services = auth_of(request.app)
    token = request.cookies.get(AUTH_COOKIE)
    if token:
        # A session that owes its account's second factor (requireMfa) is no viewer of the
        # pages: its refresh is refused alike, so the browser signs in again, with the factor.
        try:
            principal = await authenticate(request, token)
        except AppError:
            pass
        else:
            if not principal.owes_factor:
                return principal
    raw = request.cookies.get(REFRESH_COOKIE)
    if not raw:
        if token:
            request[STALE] = True
        return None
    try:
        signed = await auth_service.refresh_session(
            services, refresh_token=raw, client=client_meta(request)
        )
        principal = await recheck(services.identity, signed.tokens.access)
    except AppError:
        request[STALE] = True
        return None
    if principal.owes_factor:
        request[STALE] = True
        return None
    request[ISSUED] = signed.tokens
    return principal


async def load_viewer(request: web.Request) -> Viewer | None:
    """The page's viewer (cached on the request), or None when nobody is signed in."""
    if VIEWER in request:
        return request[VIEWER]
    principal = await _principal(request)
    viewer = None
    if principal is not None:
        async with accounts_of(request.app).db.connection() as conn:
            me = await current_user(conn, principal)
        if me is not None:
            count = await in_app.cached_unread_count(
                notifications_of(request.app), user_id=principal.user_id
            )
            viewer = Viewer(principal=principal, me=me, unread=count["count"])
            request[PRINCIPAL] = principal  # the request log names the user
    request[VIEWER] = viewer
    return viewer


def forget_viewer(request: web.Request) -> None:
    """Drop the cached viewer (after a sign-in, switch or sign-out changed it)."""
    request.pop(VIEWER, None)


def apply_session(request: web.Request, response: web.StreamResponse, settings: Settings) -> None:
    """Put the cookies this request decided on onto its response."""
    issued = request.get(ISSUED)
    access = request.get(ACCESS)
    device = request.get(DEVICE)
    if device is not None:
        set_device_cookie(response, settings, device, max_age=DEVICE_COOKIE_MAX_AGE)
    if issued is not None:
        set_session_cookies(response, settings, issued)
    elif access is not None:
        set_access_cookie(response, settings, access[0], access[1])
    elif request.get(STALE):
        clear_session_cookies(response, settings)
