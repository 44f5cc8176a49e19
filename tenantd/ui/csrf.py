"""CSRF for the pages' forms: a same-origin check plus a per-form token.

The token is an HMAC, under a key derived from SECRET_KEY, of a random per-browser cookie and
the form's action path; a cross-site page can neither read the cookie nor compute the HMAC,
and a token of one form does not open another.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from aiohttp import web

from tenantd.settings import Settings
from tenantd.web.body import origin_allowed

CSRF_COOKIE = "tenantd_csrf"
FIELD = "csrf"
NEW_COOKIE: web.RequestKey[str] = web.RequestKey("ui_csrf_new_cookie")


def _key(secret_key: str) -> bytes:
    return hmac.new(secret_key.encode(), b"tenantd.ui.csrf", hashlib.sha256).digest()


def browser_secret(request: web.Request) -> str:
    """This browser's CSRF cookie value (a new one is set on the response when missing)."""
    value = request.cookies.get(CSRF_COOKIE) or request.get(NEW_COOKIE)
    if not value or len(value) > 100:
        value = secrets.token_urlsafe(24)
        request[NEW_COOKIE] = value
    return value


def form_token(request: web.Request, settings: Settings, action: str) -> str:
    mac = hmac.new(_key(settings.secret_key), digestmod=hashlib.sha256)
    mac.update(browser_secret(request).encode())
    mac.update(b"\x00")
    mac.update(action.encode())
    return mac.hexdigest()


def valid_token(request: web.Request, settings: Settings, action: str, token: str) -> bool:
    if not request.cookies.get(CSRF_COOKIE) or not token:
        return False
    return hmac.compare_digest(form_token(request, settings, action), token)


def same_origin(request: web.Request, settings: Settings) -> bool:
    return origin_allowed(request, settings)


def remember(request: web.Request, response: web.StreamResponse, settings: Settings) -> None:
    """Set the CSRF cookie when this request minted one."""
    value = request.get(NEW_COOKIE)
    if value:
        response.set_cookie(
            CSRF_COOKIE,
            value,
            path="/",
            httponly=True,
            samesite="Lax",
            secure=settings.web.cookie_secure,
            max_age=60 * 60 * 24 * 365,
        )
