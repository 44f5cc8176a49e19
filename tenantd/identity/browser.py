"""The browser's end of a federated sign-in (social OpenID Connect and SSO): redirects that
keep the callback's URL to themselves, the forms a provider posts, what the request tells
about the client, and the cookies of a finished sign-in."""

from __future__ import annotations

from urllib.parse import parse_qsl

from aiohttp import web

from tenantd.identity.cookies import (
    DEVICE_COOKIE,
    set_cookie,
    set_device_cookie,
    set_session_cookies,
)
from tenantd.identity.devices import DEVICE_COOKIE_MAX_AGE
from tenantd.identity.sessions import ClientMeta, IssuedTokens
from tenantd.identity.signin import ProviderRedirect
from tenantd.settings import Settings
from tenantd.web.body import read_limited


def redirect(location: str) -> web.Response:
    """A 302 never cached, that sends no Referer (the callback's URL carries the code)."""
    return web.Response(
        status=302,
        headers={
            "Location": location,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
        },
    )


def to_provider(settings: Settings, started: ProviderRedirect) -> web.Response:
    """The redirect to the provider's sign-in page, setting the flow's cookie (its state)."""
    response = redirect(started.location)
    set_cookie(
        response,
        settings,
        started.cookie,
        started.value,
        max_age=started.max_age,
        path=started.path,
        same_site=started.same_site,
    )
    return response


async def read_form(request: web.Request, limit: int) -> dict[str, str]:
    """The urlencoded form a provider posted (at most `limit` bytes)."""
    raw = await read_limited(request, limit)
    return dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))


def client_meta(request: web.Request, *, ip: str | None) -> ClientMeta:
    """The request's User-Agent and device cookie, with the client address the caller trusts
    (the peer's, or the rate limiter's behind trusted proxies)."""
    return ClientMeta(
        user_agent=request.headers.get("User-Agent"),
        ip=ip,
        device=request.cookies.get(DEVICE_COOKIE),
    )


def set_signed_in_cookies(
    response: web.StreamResponse, settings: Settings, tokens: IssuedTokens, device: str | None
) -> None:
    """The session cookies of a finished sign-in, and the device cookie again (its lifetime
    renews) when the sign-in has one."""
    set_session_cookies(response, settings, tokens)
    if device is not None:
        set_device_cookie(response, settings, device, max_age=DEVICE_COOKIE_MAX_AGE)
