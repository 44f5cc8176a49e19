"""Cookie attributes: HttpOnly, SameSite=Lax, Path=/, Secure unless COOKIE_SECURE=false."""

from __future__ import annotations

import time

from aiohttp import web

from tenantd.identity.sessions import IssuedTokens
from tenantd.settings import Settings

AUTH_COOKIE = "auth_token"
REFRESH_COOKIE = "refresh_token"
# The browser that signed up: lets its own verification link install its password.
BINDING_COOKIE = "registration_binding"


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


def set_binding_cookie(
    response: web.StreamResponse, settings: Settings, binding: str, *, max_age: int
) -> None:
    response.set_cookie(
        BINDING_COOKIE,
        binding,
        max_age=max_age,
        httponly=True,
        samesite="Lax",
        path="/",
        secure=settings.cookie_secure,
    )


def clear_binding_cookie(response: web.StreamResponse, settings: Settings) -> None:
    response.del_cookie(
        BINDING_COOKIE, path="/", secure=settings.cookie_secure, httponly=True, samesite="Lax"
    )
