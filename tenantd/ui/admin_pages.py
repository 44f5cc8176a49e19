"""`GET /impersonate?token=T`: an operator's one-time link signs in as the user and lands
on `/` (tenantd/auth/admin/service.py says what the session may do)."""

from __future__ import annotations

from aiohttp import web

from tenantd.auth.admin import service as admin
from tenantd.auth.domain import auth_of
from tenantd.identity.cookies import REFRESH_COOKIE, clear_cookie, set_access_cookie
from tenantd.ui.render import redirect
from tenantd.ui.session import client_meta, forget_viewer

IMPERSONATE = admin.IMPERSONATE_PATH


async def impersonate_page(request: web.Request) -> web.Response:
    services = auth_of(request.app)
    tokens = await admin.start_impersonation(
        services, token=request.query.get("token", ""), client=client_meta(request)
    )
    forget_viewer(request)
    response = redirect(request, "/")
    # The browser's own session (if any) gives way: no refresh cookie, so nothing outlives
    # the impersonation's one access token.
    clear_cookie(response, services.settings, REFRESH_COOKIE)
    set_access_cookie(response, services.settings, tokens.access_token, tokens.access)
    return response
