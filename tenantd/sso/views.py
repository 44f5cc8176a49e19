"""SSO routes: the account's connections (owner, admin), and the browser's sign-in through
one (start, SAML metadata and assertion consumer service, OIDC callback).

Browser outcomes are redirects: success lands on the sign-in's `returnTo` (or `/`) with the
session cookies; a refusal goes to `/login?error=<code>` (codes in errors.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from pydantic import Field

from tenantd.auth.oauth.flow import STATE_COOKIE
from tenantd.auth.oauth.service import CallbackQuery
from tenantd.db import Row
from tenantd.identity import browser
from tenantd.identity.account_call import in_account_of
from tenantd.identity.cookies import clear_cookie
from tenantd.identity.sessions import ClientMeta
from tenantd.identity.signin import ProviderRedirect
from tenantd.sso import saml, service, signin
from tenantd.sso.domain import Sso, sso_of
from tenantd.sso.errors import SsoRefused
from tenantd.sso.schemas import ConnectionChange, ConnectionCreate, ConnectionOut
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import ApiModel, Empty
from tenantd.web.spec import REDIRECT, Access, Routes

log = logging.getLogger(__name__)

ROUTES = Routes("sso")

CONNECTIONS = "/api/v1/accounts/{id}/sso-connections"
CONNECTION = CONNECTIONS + "/{cid}"
ACS_FORM_LIMIT = saml.MAX_RESPONSE_BYTES + 8 * 1024  # SAMLResponse, RelayState
LOGIN_PATH = "/login"
# A step of a browser's sign-in: open to anyone, answered with a redirect.
SIGN_IN_STEP: dict[str, Any] = {**REDIRECT, "access": Access.PUBLIC}


def _out(services: Sso, row: Row) -> ConnectionOut:
    return ConnectionOut.model_validate(service.Described(row, services.settings).as_dict())


def _client(request: web.Request) -> ClientMeta:
    return browser.client_meta(request, ip=request.remote)


def _refused(refused: SsoRefused, **params: str) -> web.Response:
    log.warning(
        "sso sign-in refused: %s",
        refused.code,
        extra={"sso": {"code": refused.code, "reason": refused.reason}},
    )
    return browser.redirect(f"{LOGIN_PATH}?{urlencode({'error': refused.code, **params})}")


def _signed_in(services: Sso, signed: signin.SsoSignedIn) -> web.Response:
    response = browser.redirect(signed.return_to)
    browser.set_signed_in_cookies(response, services.settings, signed.tokens, signed.device)
    return response


def _started(services: Sso, started: ProviderRedirect) -> web.Response:
    return browser.to_provider(services.settings, started)


async def _answer(
    services: Sso, signing: Awaitable[signin.SsoSignedIn], spent: signin.FlowCookie
) -> web.Response:
    """The end of a sign-in: signed in, or refused; its flow cookie is spent either way."""
    try:
        response = _signed_in(services, await signing)
    except SsoRefused as refused:
        response = _refused(refused)
    clear_cookie(
        response, services.settings, spent.name, path=spent.path, same_site=spent.same_site
    )
    return response


# -- the account's connections ----------------------------------------------------------------


@ROUTES.get(CONNECTIONS, summary="The account's SSO connections (admin+)")
async def list_connections(request: web.Request) -> list[ConnectionOut]:
    services = sso_of(request.app)
    rows = await in_account_of(services, request, service.list_connections)
    return [_out(services, row) for row in rows]


@ROUTES.post(
    CONNECTIONS,
    status=201,
    responses={
        409: "SSO_DOMAIN_TAKEN: another live connection holds a domain, or another account"
        " claims it",
        422: "VALIDATION_ERROR: a public or malformed domain, unusable identity provider",
    },
    summary="Add a SAML or OpenID Connect connection (admin+)",
)
async def create_connection(request: web.Request, body: ConnectionCreate) -> ConnectionOut:
    services = sso_of(request.app)
    row = await in_account_of(services, request, service.create_connection, body)
    return _out(services, row)


@ROUTES.patch(
    CONNECTION,
    responses={409: "SSO_DOMAIN_TAKEN", 404: "No such connection in this account"},
    summary="Change a connection (admin+); enforce: true ends other sessions of its users",
)
async def update_connection(request: web.Request, body: ConnectionChange) -> ConnectionOut:
    services = sso_of(request.app)
    cid = path_uuid(request, "cid")
    row = await in_account_of(services, request, service.update_connection, cid, body)
    return _out(services, row)


@ROUTES.delete(
    CONNECTION,
    response=Empty,
    responses={404: "No such connection in this account"},
    summary="Remove a connection (admin+); its domains are free again",
)
async def delete_connection(request: web.Request) -> dict[str, str]:
    await in_account_of(
        sso_of(request.app), request, service.delete_connection, path_uuid(request, "cid")
    )
    return {}


# -- the browser's sign-in --------------------------------------------------------------------


class StartQuery(ApiModel):
    email: str | None = Field(None, max_length=320, description="Home-realm discovery by domain")
    connection: str | None = Field(None, max_length=64, description="A connection's id")
    return_to: str | None = Field(None, description="Same-origin path to land on afterwards")


@ROUTES.get(
    "/sso/start",
    **SIGN_IN_STEP,
    responses={404: "No live connection of that id"},
    summary="Redirect to the identity provider of the connection (by id, or by the email's"
    " domain; no connection for the domain: back to /login with the email)",
)
async def sso_start(request: web.Request, query: StartQuery) -> web.Response:
    services = sso_of(request.app)
    try:
        started = await signin.begin(
            services, connection=query.connection, email=query.email, return_to=query.return_to
        )
    except SsoRefused as refused:
        return _refused(refused)
    if started is None:  # not an SSO domain: the password form for this address
        return browser.redirect(f"{LOGIN_PATH}?{urlencode({'email': query.email or ''})}")
    return _started(services, started)


@ROUTES.get(
    "/sso/saml/{connectionId}/metadata",
    access=Access.PUBLIC,
    status=200,
    wrapped=False,
    produces="application/samlmetadata+xml",
    responses={404: "No live SAML connection of that id"},
    summary="The service provider metadata of a SAML connection (give it to the IdP)",
)
async def saml_metadata(request: web.Request) -> web.Response:
    document = await service.sp_metadata(sso_of(request.app), path_uuid(request, "connectionId"))
    return web.Response(text=document, content_type="application/samlmetadata+xml")


# Access.SIGNATURE: the answer is authenticated by its XML signature and bound to the browser
# by the binding cookie, never by a session cookie; so no Origin check either (an identity
# provider on a sibling subdomain posts same-site, with the session cookies).
@ROUTES.post(
    "/sso/saml/{connectionId}/acs",
    **REDIRECT,
    access=Access.SIGNATURE,
    body_limit=ACS_FORM_LIMIT,
    summary="The assertion consumer service (HTTP-POST): a verified answer signs in and"
    " lands on returnTo; anything else goes to /login?error=<code>",
)
async def saml_acs(request: web.Request) -> web.Response:
    services, connection_id = sso_of(request.app), path_uuid(request, "connectionId")
    form = await browser.read_form(request, ACS_FORM_LIMIT)
    signing = signin.consume_saml(
        services,
        connection_id,
        form=form,
        binding=request.cookies.get(signin.BINDING_COOKIE),
        client=_client(request),
    )
    return await _answer(services, signing, signin.saml_cookie(services, connection_id))


@ROUTES.get(
    "/sso/oidc/{connectionId}/callback",
    **SIGN_IN_STEP,
    summary="Finish a sign-in through an OpenID Connect connection",
)
async def oidc_callback(request: web.Request, query: CallbackQuery) -> web.Response:
    services, connection_id = sso_of(request.app), path_uuid(request, "connectionId")
    signing = signin.complete_oidc(
        services,
        connection_id,
        params=query.params(),
        state_cookie=request.cookies.get(STATE_COOKIE),
        client=_client(request),
    )
    return await _answer(services, signing, signin.oidc_cookie(services, connection_id))
