"""Cookie attributes: HttpOnly, SameSite=Lax, Path=/, Secure unless COOKIE_SECURE=false."""

from __future__ import annotations

import time

from aiohttp import web

from tenantd.identity.sessions import IssuedTokens
from tenantd.settings import Settings

AUTH_COOKIE = "auth_token"
REFRESH_COOKIE = "refresh_token"


def set_session_cookies(
    response: web.StreamResponse, settings: Settings, tokens: IssuedTokens
) -> None:
    common = {"httponly": True, "samesite": "Lax", "path": "/", "secure": settings.cookie_secure}
    # Max-Age = remaining lifetime, so browsers stop sending the token when it expires.
    access_age = max(0, int(tokens.access.expires_at - time.time()))
    response.set_cookie(AUTH_COOKIE, tokens.access_token, max_age=access_age, **common)  # type: ignore[arg-type]
    refresh_age = max(0, int(tokens.refresh_expires_at.timestamp() - time.time()))
    response.set_cookie(REFRESH_COOKIE, tokens.refresh_token, max_age=refresh_age, **common)  # type: ignore[arg-type]


def clear_session_cookies(response: web.StreamResponse, settings: Settings) -> None:
    for name in (AUTH_COOKIE, REFRESH_COOKIE):
        response.del_cookie(
            name, path="/", secure=settings.cookie_secure, httponly=True, samesite="Lax"
        )
