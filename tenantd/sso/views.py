"""SSO routes: the account's connections (owner, admin), and the browser's sign-in through
one (start, SAML metadata and assertion consumer service, OIDC callback).

Browser outcomes are redirects: success lands on the sign-in's `returnTo` (or `/`) with the
session cookies; a refusal goes to `/login?error=<code>` (codes in errors.py).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from urllib.parse import parse_qsl, urlencode

from aiohttp import web
from pydantic import Field

from tenantd.auth.oauth.flow import STATE_COOKIE
from tenantd.auth.oauth.service import CallbackParams
from tenantd.db import Row
from tenantd.errors import NotFound
from tenantd.identity.bundle import SERVICES
from tenantd.identity.bundle import IdentityServices as Services
from tenantd.identity.cookies import (
    DEVICE_COOKIE,
    clear_cookie,
    set_cookie,
    set_device_cookie,
    set_session_cookies,
)
from tenantd.identity.devices import DEVICE_COOKIE_MAX_AGE
from tenantd.identity.signin import ClientMeta
from tenantd.principal import current_principal
from tenantd.sso import saml, service, signin
from tenantd.sso.errors import SsoRefused
from tenantd.sso.schemas import ConnectionChange, ConnectionCreate, ConnectionOut
from tenantd.web.body import read_limited
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import ApiModel, Empty
from tenantd.web.spec import Access, Routes

log = logging.getLogger(__name__)

ROUTES = Routes("sso")

CONNECTIONS = "/api/v1/accounts/{id}/sso-connections"
CONNECTION = CONNECTIONS + "/{cid}"
ACS_FORM_LIMIT = saml.MAX_RESPONSE_BYTES + 8 * 1024  # SAMLResponse, RelayState
LOGIN_PATH = "/login"


def _services(request: web.Request) -> Services:
    return request.app[SERVICES]


def _out(services: Services, row: Row) -> ConnectionOut:
    return ConnectionOut.model_validate(service.Described(row, services.settings).as_dict())


def _client(request: web.Request) -> ClientMeta:
    return ClientMeta(
        user_agent=request.headers.get("User-Agent"),
        ip=request.remote,
        device=request.cookies.get(DEVICE_COOKIE),
    )


def _redirect(location: str) -> web.Response:
    return web.Response(
        status=302,
        headers={
            "Location": location,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
        },
    )


def _refused(refused: SsoRefused, **params: str) -> web.Response:
    log.warning(
        "sso sign-in refused: %s",
        refused.code,
        extra={"sso": {"code": refused.code, "reason": refused.reason}},
    )
    return _redirect(f"{LOGIN_PATH}?{urlencode({'error': refused.code, **params})}")


def _signed_in(services: Services, signed: signin.SsoSignedIn) -> web.Response:
    response = _redirect(signed.return_to)
    set_session_cookies(response, services.settings, signed.tokens)
    set_device_cookie(response, services.settings, signed.device, max_age=DEVICE_COOKIE_MAX_AGE)
    return response


# -- the account's connections ----------------------------------------------------------------


@ROUTES.get(
    CONNECTIONS, response=list[ConnectionOut], summary="The account's SSO connections (admin+)"
)
async def list_connections(request: web.Request) -> list[ConnectionOut]:
    services = _services(request)
    rows = await service.list_connections(
        services, current_principal(request), path_uuid(request, "id")
    )
    return [_out(services, row) for row in rows]


@ROUTES.post(
    CONNECTIONS,
    body=ConnectionCreate,
    response=ConnectionOut,
    status=201,
    responses={
        409: "SSO_DOMAIN_TAKEN: another live connection holds a domain, or another account"
        " claims it",
        422: "VALIDATION_ERROR: a public or malformed domain, unusable identity provider",
    },
    summary="Add a SAML or OpenID Connect connection (admin+)",
)
async def create_connection(request: web.Request, body: ConnectionCreate) -> ConnectionOut:
    services = _services(request)
    row = await service.create_connection(
        services, current_principal(request), path_uuid(request, "id"), body
    )
    return _out(services, row)


@ROUTES.patch(
    CONNECTION,
    body=ConnectionChange,
    response=ConnectionOut,
    responses={409: "SSO_DOMAIN_TAKEN", 404: "No such connection in this account"},
    summary="Change a connection (admin+); enforce: true ends other sessions of its users",
)
async def update_connection(request: web.Request, body: ConnectionChange) -> ConnectionOut:
    services = _services(request)
    row = await service.update_connection(
        services,
        current_principal(request),
        path_uuid(request, "id"),
        path_uuid(request, "cid"),
        body,
    )
    return _out(services, row)


@ROUTES.delete(
    CONNECTION,
    response=Empty,
    responses={404: "No such connection in this account"},
    summary="Remove a connection (admin+); its domains are free again",
)
async def delete_connection(request: web.Request) -> dict[str, str]:
    await service.delete_connection(
        _services(request),
        current_principal(request),
        path_uuid(request, "id"),
        path_uuid(request, "cid"),
    )
    return {}


# -- the browser's sign-in --------------------------------------------------------------------


class StartQuery(ApiModel):
    email: str | None = Field(None, max_length=320, description="Home-realm discovery by domain")
    connection: str | None = Field(None, max_length=64, description="A connection's id")
    return_to: str | None = Field(None, description="Same-origin path to land on afterwards")


@ROUTES.get(
    "/sso/start",
    access=Access.PUBLIC,
    query=StartQuery,
    status=302,
    wrapped=False,
    responses={404: "No live connection of that id"},
    summary="Redirect to the identity provider of the connection (by id, or by the email's"
    " domain; no connection for the domain: back to /login with the email)",
)
async def sso_start(request: web.Request, query: StartQuery) -> web.Response:
    services = _services(request)
    try:
        if query.connection is not None:
            connection = await service.find_connection(
                services, connection_id=path_uuid_value(query.connection)
            )
        else:
            connection = await service.find_connection(services, email=query.email or "")
    except NotFound:
        if query.connection is not None:
            raise
        # Not an SSO domain: the password form (and the other ways in) for this address.
        return _redirect(f"{LOGIN_PATH}?{urlencode({'email': query.email or ''})}")
    try:
        started = await signin.start(services, connection, return_to=query.return_to)
    except SsoRefused as refused:
        return _refused(refused)
    response = _redirect(started.location)
    set_cookie(
        response,
        services.settings,
        started.cookie_name,
        started.cookie_value,
        max_age=started.max_age,
        path=started.cookie_path,
        same_site=started.same_site,
    )
    return response


def path_uuid_value(value: str) -> uuid.UUID:
    """A connection id from the query; anything else is not found."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound("No single sign-on connection") from None


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
    services = _services(request)
    connection = await service.find_connection(
        services, connection_id=path_uuid(request, "connectionId")
    )
    if connection["type"] != "saml":
        raise NotFound("No SAML connection of this id")
    ends = service.endpoints(services.settings, connection["id"])
    idp = service.idp_metadata(connection)
    config = await asyncio.to_thread(
        saml.sp_config,
        ends,
        idp.metadata_xml,
        allow_idp_initiated=connection["allow_idp_initiated"],
    )
    document = await asyncio.to_thread(saml.sp_metadata, config)
    return web.Response(text=document, content_type="application/samlmetadata+xml")


# Access.SIGNATURE: the answer is authenticated by its XML signature and bound to the browser
# by the binding cookie, never by a session cookie; so no Origin check either (an identity
# provider on a sibling subdomain posts same-site, with the session cookies).
@ROUTES.post(
    "/sso/saml/{connectionId}/acs",
    access=Access.SIGNATURE,
    status=302,
    wrapped=False,
    body_limit=ACS_FORM_LIMIT,
    summary="The assertion consumer service (HTTP-POST): a verified answer signs in and"
    " lands on returnTo; anything else goes to /login?error=<code>",
)
async def saml_acs(request: web.Request) -> web.Response:
    services = _services(request)
    connection_id = path_uuid(request, "connectionId")
    raw = await read_limited(request, ACS_FORM_LIMIT)
    form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    path = service.endpoints(services.settings, connection_id).acs_url
    try:
        signed = await signin.consume_saml(
            services,
            connection_id,
            saml_response=form.get("SAMLResponse", ""),
            relay_state=form.get("RelayState"),
            binding=request.cookies.get(signin.BINDING_COOKIE),
            client=_client(request),
        )
    except SsoRefused as refused:
        response = _refused(refused)
    else:
        response = _signed_in(services, signed)
    clear_cookie(
        response,
        services.settings,
        signin.BINDING_COOKIE,
        path=signin.cookie_path(path),
        same_site="None",
    )
    return response


class CallbackQuery(ApiModel):
    code: str | None = None
    state: str | None = None
    error: str | None = None
    iss: str | None = None


@ROUTES.get(
    "/sso/oidc/{connectionId}/callback",
    access=Access.PUBLIC,
    query=CallbackQuery,
    status=302,
    wrapped=False,
    summary="Finish a sign-in through an OpenID Connect connection",
)
async def oidc_callback(request: web.Request, query: CallbackQuery) -> web.Response:
    services = _services(request)
    connection_id = path_uuid(request, "connectionId")
    try:
        signed = await signin.complete_oidc(
            services,
            connection_id,
            params=CallbackParams(
                code=query.code, state=query.state, error=query.error, iss=query.iss
            ),
            state_cookie=request.cookies.get(STATE_COOKIE),
            client=_client(request),
        )
    except SsoRefused as refused:
        response = _refused(refused)
    else:
        response = _signed_in(services, signed)
    callback = service.oidc_redirect_uri(services.settings, connection_id)
    clear_cookie(response, services.settings, STATE_COOKIE, path=signin.cookie_path(callback))
    return response
