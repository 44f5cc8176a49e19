"""OAuth routes: start, callback (browser navigations: they answer with redirects), unlink,
and the list of configured providers.

Callback outcomes are redirects, because the browser arrives here from the provider's page:
success goes to the saved `returnTo` (or `/`), or, for a user with a second factor, to
`/login/mfa?ticket=T` (no session cookie yet; the `mfa_binding` cookie binds the ticket to
this browser); a refusal goes to `/login?error=<code>` (codes
in errors.py), with `domain` and `accountId` added for `domain_claimed`. A step-up flow
(GET .../reauth, see reauth.py) lands on its `returnTo` with a new access token.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from pydantic import Field

from tenantd.auth.domain import auth_of
from tenantd.auth.oauth import errors, presets, service
from tenantd.auth.oauth.errors import OAuthRefused
from tenantd.auth.oauth.flow import STATE_COOKIE, ReauthBinding, callback_path
from tenantd.auth.oauth.reauth import SteppedUp
from tenantd.auth.oauth.service import CallbackQuery
from tenantd.errors import NotFound
from tenantd.identity import browser
from tenantd.identity.cookies import (
    clear_cookie,
    set_access_cookie,
    set_cookie,
)
from tenantd.identity.errors import SsoRequired, UserDisabled
from tenantd.identity.settings import SignInSettings
from tenantd.mfa import service as mfa
from tenantd.principal import current_principal
from tenantd.settings import SETTINGS, Settings
from tenantd.web.schemas import ApiModel, Empty
from tenantd.web.spec import REDIRECT, Access, Routes

log = logging.getLogger(__name__)

ROUTES = Routes("auth")

LOGIN_PATH = "/login"
FORM_POST_LIMIT = 64 * 1024  # Apple's form: code, state, id_token and the user's name
MFA_PATH = "/login/mfa"  # the hosted page asking for the second factor (?ticket=...)
# A sign-in at a provider: anyone may start it, and each step answers with a redirect.
PROVIDER_SIGN_IN: dict[str, Any] = {
    **REDIRECT,
    "access": Access.PUBLIC,
    "responses": {404: "Unknown provider"},
}


class StartQuery(ApiModel):
    return_to: str | None = Field(
        None, description="Relative path to land on after sign-in (same origin only)"
    )


class ProviderOut(ApiModel):
    name: str
    start_url: str


def _clear_state(response: web.StreamResponse, settings: Settings, provider: str) -> None:
    same_site = "Lax"
    for config in settings.section(SignInSettings).oauth_providers:
        if config.name == provider:
            same_site = presets.state_same_site(config)
    clear_cookie(
        response,
        settings,
        STATE_COOKIE,
        path=callback_path(settings, provider),
        same_site=same_site,
    )


def _refused(refused: OAuthRefused, provider: str) -> web.Response:
    log.warning(
        "oauth sign-in refused: %s",
        refused.code,
        extra={"oauth": {"provider": provider, "code": refused.code, "reason": refused.reason}},
    )
    return browser.redirect(f"{LOGIN_PATH}?{urlencode({'error': refused.code, **refused.params})}")


@ROUTES.get(
    "/api/v1/auth/oauth/providers",
    access=Access.PUBLIC,
    response=list[ProviderOut],
    summary="Configured OpenID Connect providers",
)
async def oauth_providers(request: web.Request) -> list[dict[str, str]]:
    return service.configured_providers(request.app[SETTINGS])


@ROUTES.get(
    "/api/v1/auth/oauth/{provider}/start",
    **PROVIDER_SIGN_IN,
    summary="Redirect to the provider's sign-in page (state, nonce, PKCE in a cookie)",
)
async def oauth_start(request: web.Request, query: StartQuery) -> web.Response:
    return await _start(request, query.return_to)


async def _start(
    request: web.Request, return_to: str | None, reauth: ReauthBinding | None = None
) -> web.Response:
    services = auth_of(request.app)
    provider = request.match_info["provider"]
    try:
        started = await service.start(
            services.oidc,
            services.settings,
            provider=provider,
            return_to=return_to,
            reauth=reauth,
        )
    except OAuthRefused as refused:
        return _refused(refused, provider)
    return browser.to_provider(services.settings, started)


@ROUTES.get(
    "/api/v1/auth/oauth/{provider}/reauth",
    **REDIRECT,
    responses={
        404: "Unknown provider, or no identity of it is linked to the caller",
        409: "The caller's token belongs to no session",
    },
    summary="Step-up through the provider: redirect to it with prompt=login and max_age=0;"
    " its callback refreshes this session's auth_time and goes to returnTo",
)
async def oauth_reauth(request: web.Request, query: StartQuery) -> web.Response:
    binding = await service.reauth_binding(
        auth_of(request.app), current_principal(request), provider=request.match_info["provider"]
    )
    return await _start(request, query.return_to, binding)


@ROUTES.get(
    "/api/v1/auth/oauth/{provider}/callback",
    **PROVIDER_SIGN_IN,
    summary="Finish the provider sign-in: session cookies and a redirect",
)
async def oauth_callback(request: web.Request, query: CallbackQuery) -> web.Response:
    return await _callback(request, query.params())


@ROUTES.post(
    "/api/v1/auth/oauth/{provider}/callback",
    **PROVIDER_SIGN_IN,
    summary="Finish a provider sign-in answered with response_mode=form_post (Apple)",
)
async def oauth_callback_form(request: web.Request) -> web.Response:
    form = await browser.read_form(request, FORM_POST_LIMIT)
    return await _callback(request, service.CallbackParams.of_form(form))


async def _callback(request: web.Request, params: service.CallbackParams) -> web.Response:
    services = auth_of(request.app)
    provider = request.match_info["provider"]
    try:
        signed = await service.complete(
            services,
            services.oidc,
            provider=provider,
            params=params,
            state_cookie=request.cookies.get(STATE_COOKIE),
            client=browser.client_meta(request, ip=request.remote),
        )
    except OAuthRefused as refused:
        response = _refused(refused, provider)
    except UserDisabled:
        refusal = OAuthRefused(errors.USER_DISABLED, "an operator disabled the user")
        response = _refused(refusal, provider)
    except SsoRequired as required:
        # An enforced SSO connection binds the user: the login page offers its sign-in.
        found = {"connection": (required.details or {}).get("connectionId", "")}
        refusal = OAuthRefused(errors.SSO_REQUIRED, "enforced SSO connection", params=found)
        response = _refused(refusal, provider)
    else:
        if isinstance(signed, SteppedUp):
            # A step-up of the session that asked: a new access token, the same session.
            response = browser.redirect(signed.return_to)
            set_access_cookie(response, services.settings, signed.access_token, signed.claims)
        elif signed.ticket is not None:
            # A second factor is due: the MFA page finishes the sign-in and then goes to
            # `returnTo` (POST /api/v1/auth/mfa/verify answers it).
            response = browser.redirect(f"{MFA_PATH}?{urlencode({'ticket': signed.ticket.ticket})}")
            set_cookie(
                response,
                services.settings,
                mfa.BINDING_COOKIE,
                signed.ticket.binding,
                max_age=mfa.TICKET_TTL_SECONDS,
            )
        else:
            assert signed.tokens is not None
            response = browser.redirect(signed.return_to)
            browser.set_signed_in_cookies(response, services.settings, signed.tokens, signed.device)
    _clear_state(response, services.settings, provider)
    return response


@ROUTES.delete(
    "/api/v1/auth/oauth/{provider}",
    response=Empty,
    responses={409: "The last way to sign in cannot be removed"},
    summary="Unlink the caller's identity at a provider",
)
async def oauth_unlink(request: web.Request) -> dict[str, str]:
    provider = request.match_info["provider"]
    if len(provider) > 64:
        raise NotFound()
    user_id = current_principal(request).user_id
    client = service.ClientMeta(user_agent=request.headers.get("User-Agent"), ip=request.remote)
    db = auth_of(request.app).db
    await service.unlink(db, user_id=user_id, provider=provider, client=client)
    return {}
