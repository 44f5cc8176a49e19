"""tenantd's cookies and their one policy: HttpOnly, SameSite=Lax, Path=/ (the OAuth state
cookie: its callback path), Secure unless COOKIE_SECURE=false, and Max-Age the value's
remaining lifetime (0 when cleared). The access-token cookie alone takes Domain=
SESSION_COOKIE_DOMAIN when set, so the app's own server on a sibling subdomain receives it too
(the refresh token stays host-only: only tenantd ever reads it)."""

from __future__ import annotations

import re
import time

from aiohttp import hdrs, web

from tenantd.identity.sessions import IssuedTokens
from tenantd.principal import AccessClaims
from tenantd.settings import Settings

AUTH_COOKIE = "auth_token"
REFRESH_COOKIE = "refresh_token"
# The browser that signed up: lets its own verification link install its password.
BINDING_COOKIE = "registration_binding"
# The browser, across sign-ins: a random id whose keyed hash per user says "seen before",
# signed for the user who signed in last (its own login budget: tenantd/ops/ratelimit.py).
DEVICE_COOKIE = "device_id"


# The characters a cookie value may hold without quoting (http.cookies' legal characters):
# such a value is written exactly as SimpleCookie would write it.
_PLAIN = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~:]+")


def set_cookie(
    response: web.StreamResponse,
    settings: Settings,
    name: str,
    value: str,
    *,
    max_age: int,
    path: str = "/",
    same_site: str = "Lax",
    domain: str | None = None,
) -> None:
    """Set one of tenantd's cookies with the policy.

    `same_site="None"` (only the state cookie of a provider answering with a cross-site
    form POST, Apple's form_post) is always Secure: browsers drop SameSite=None otherwise.

    A plain value (every token of ours) on Path=/ is written as its Set-Cookie header at once,
    with the attributes in the order aiohttp's Morsel writes them: a Morsel, built and then
    written out, cost more than the rest of the refresh's response. Anything else goes
    through aiohttp's `set_cookie`."""
    if path != "/" or not _PLAIN.fullmatch(value) or same_site != "Lax":
        _drop_header(response, name)
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=path,
            domain=domain,
            httponly=True,
            samesite=same_site,
            secure=settings.web.cookie_secure or same_site == "None",
        )
        return
    response.cookies.pop(name, None)  # a Morsel set earlier would be written after us
    _drop_header(response, name)
    secure = "; Secure" if settings.web.cookie_secure else ""
    scope = f"Domain={domain}; " if domain else ""
    response.headers.add(
        hdrs.SET_COOKIE,
        f"{name}={value}; {scope}HttpOnly; Max-Age={max_age}; Path={path}; SameSite=Lax{secure}",
    )


def _drop_header(response: web.StreamResponse, name: str) -> None:
    """Forget a Set-Cookie header written earlier for `name` (the last word on it wins)."""
    headers = response.headers
    if hdrs.SET_COOKIE not in headers:
        return
    values = headers.getall(hdrs.SET_COOKIE)
    kept = [value for value in values if not value.startswith(f"{name}=")]
    if len(kept) != len(values):
        del headers[hdrs.SET_COOKIE]
        for value in kept:
            headers.add(hdrs.SET_COOKIE, value)


def clear_cookie(
    response: web.StreamResponse,
    settings: Settings,
    name: str,
    *,
    path: str = "/",
    same_site: str = "Lax",
    domain: str | None = None,
) -> None:
    """Clear one of tenantd's cookies (Max-Age=0) with the attributes it was set with."""
    _drop_header(response, name)
    response.del_cookie(
        name,
        path=path,
        domain=domain,
        secure=settings.web.cookie_secure or same_site == "None",
        httponly=True,
        samesite=same_site,
    )


def remaining(expires_at: float) -> int:
    """Max-Age = remaining lifetime, so browsers stop sending the token when it expires."""
    return max(0, int(expires_at - time.time()))


def set_access_cookie(
    response: web.StreamResponse, settings: Settings, token: str, claims: AccessClaims
) -> None:
    set_cookie(
        response,
        settings,
        AUTH_COOKIE,
        token,
        max_age=remaining(claims.expires_at),
        domain=settings.web.session_cookie_domain,
    )


def set_session_cookies(
    response: web.StreamResponse, settings: Settings, tokens: IssuedTokens
) -> None:
    set_access_cookie(response, settings, tokens.access_token, tokens.access)
    refresh_age = remaining(tokens.refresh_expires_at.timestamp())
    set_cookie(response, settings, REFRESH_COOKIE, tokens.refresh_token, max_age=refresh_age)


def clear_session_cookies(response: web.StreamResponse, settings: Settings) -> None:
    clear_cookie(response, settings, AUTH_COOKIE, domain=settings.web.session_cookie_domain)
    clear_cookie(response, settings, REFRESH_COOKIE)


def set_binding_cookie(
    response: web.StreamResponse, settings: Settings, binding: str, *, max_age: int
) -> None:
    set_cookie(response, settings, BINDING_COOKIE, binding, max_age=max_age)


def clear_binding_cookie(response: web.StreamResponse, settings: Settings) -> None:
    clear_cookie(response, settings, BINDING_COOKIE)


def set_device_cookie(
    response: web.StreamResponse, settings: Settings, device: str, *, max_age: int
) -> None:
    set_cookie(response, settings, DEVICE_COOKIE, device, max_age=max_age)
