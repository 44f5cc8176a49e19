"""The admin portal's hosted pages (tenantd/portal/service.py says what a link and its session
may do): `GET /portal?token=T` asks to continue, `POST /portal` trades the link for the portal
session cookie (the link never opens again), then `/portal/sso` or `/portal/directory`, the
one task the link was made for, on the one account it is bound to. Forms carry the pages'
CSRF tokens; the answers carry the pages' CSP like every other page."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from tenantd.directories import service as directories
from tenantd.directories.domain import directories_of
from tenantd.directories.schemas import DirectoryOut
from tenantd.errors import AppError, Forbidden, NotFound
from tenantd.portal import service as portal
from tenantd.portal.domain import portal_of
from tenantd.portal.service import PortalSession
from tenantd.sso import service as sso
from tenantd.sso.domain import sso_of
from tenantd.sso.schemas import ConnectionChange, ConnectionCreate
from tenantd.ui.forms import Form, field, parse, read_form, shown_again
from tenantd.ui.render import page, redirect
from tenantd.ui.strings import text
from tenantd.web.routing import path_uuid

PORTAL = portal.PORTAL_PATH
SSO = PORTAL + "/sso"
SSO_CONNECTION = SSO + "/{cid}"
DIRECTORY = PORTAL + "/directory"
PROVIDERS = ("okta", "entra", "google")
SAML_FIELDS = ("idpMetadataXml", "idpEntityId", "idpSsoUrl", "idpCertificate")
OIDC_FIELDS = ("issuer", "clientId", "clientSecret")


async def _session(request: web.Request, intent: str) -> PortalSession:
    found = await portal.find_session(
        portal_of(request.app), request.cookies.get(portal.SESSION_COOKIE)
    )
    if found is None:
        raise Forbidden(text("portal.session_ended"))
    found.require(intent)
    return found


def _domains(value: str) -> list[str]:
    return [d for d in value.replace(",", " ").split() if d]


def _given(form: MultiDictProxy[Any], names: tuple[str, ...]) -> dict[str, str]:
    """The fields typed (an empty field is left out: unchanged, or not this kind)."""
    return {name: field(form, name).strip() for name in names if field(form, name).strip()}


# -- opening the link ---------------------------------------------------------------------------


async def portal_page(request: web.Request) -> web.Response:
    token = request.query.get("token", "")
    if not token:
        raise NotFound(text("portal.invalid"))
    return page(request, "portal_open.html", title=text("portal.open_title"), token=token)


async def portal_open_post(request: web.Request) -> web.Response:
    form = await read_form(request, PORTAL)
    services = portal_of(request.app)
    session_token, session = await portal.open_link(services, field(form, "token"))
    response = redirect(request, f"{PORTAL}/{session.intent}")
    _set_session_cookie(response, services.settings.web.cookie_secure, session_token)
    return response


def _set_session_cookie(response: web.StreamResponse, secure: bool, session_token: str) -> None:
    response.set_cookie(
        portal.SESSION_COOKIE,
        session_token,
        path=PORTAL,
        httponly=True,
        samesite="Strict",
        secure=secure,
        max_age=int(portal.SESSION_TTL.total_seconds()),
    )


# -- single sign-on -------------------------------------------------------------------------------


def pending_connection(session: PortalSession) -> uuid.UUID:
    """The id the link's new connection gets: its service-provider values (ACS URL, entity
    id) are shown before the identity provider is configured, as the IdP asks for them."""
    return uuid.uuid5(session.link_id, "sso-connection")


async def _sso_context(request: web.Request, session: PortalSession) -> dict[str, Any]:
    services = sso_of(request.app)
    settings = services.settings
    rows = await sso.account_connections(services, session.account_id)
    pending = pending_connection(session)
    ends = sso.endpoints(settings, pending)
    return {
        "session": session,
        "connections": [sso.Described(row, settings).as_dict() for row in rows],
        "pending": {
            "acs_url": ends.acs_url,
            "sp_entity_id": ends.entity_id,
            "metadata_url": ends.entity_id,
            "redirect_uri": sso.oidc_redirect_uri(settings, pending),
        },
        "pending_used": any(c["id"] == pending for c in rows),
        "idps": PROVIDERS,
        "form": {},
    }


async def sso_page(request: web.Request) -> web.Response:
    session = await _session(request, "sso")
    context = await _sso_context(request, session)
    notice = text("portal.sso_saved") if request.query.get("saved") else None
    return page(
        request, "portal_sso.html", title=text("portal.sso_title"), notice=notice, **context
    )


def _typed(form: Form) -> tuple[str, dict[str, str]]:
    kind = field(form, "type")
    return kind, _given(form, SAML_FIELDS if kind == "saml" else OIDC_FIELDS)


def _create_body(form: Form) -> ConnectionCreate:
    kind, typed = _typed(form)
    return parse(
        ConnectionCreate, {"type": kind, "domains": _domains(field(form, "domains")), **typed}
    )


def _change_body(form: Form) -> ConnectionChange:
    typed: dict[str, Any] = _given(form, SAML_FIELDS + OIDC_FIELDS)
    if field(form, "domains").strip():
        typed["domains"] = _domains(field(form, "domains"))
    return parse(ConnectionChange, typed)


async def sso_create_post(request: web.Request, form: Form) -> web.StreamResponse:
    session = await _session(request, "sso")
    await sso.create_connection_in_portal(
        sso_of(request.app),
        session.account_id,
        _create_body(form),
        link_id=session.link_id,
        connection_id=pending_connection(session),
    )
    return redirect(request, SSO + "?saved=1")


async def sso_update_post(request: web.Request, form: Form) -> web.StreamResponse:
    session = await _session(request, "sso")
    await sso.update_connection_in_portal(
        sso_of(request.app),
        session.account_id,
        path_uuid(request, "cid"),
        _change_body(form),
        link_id=session.link_id,
    )
    return redirect(request, SSO + "?saved=1")


async def sso_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    """The SSO page again after a refusal, with what was typed (never the client secret)."""
    session = await _session(request, "sso")
    context = await _sso_context(request, session)
    if form is not None:
        kind, typed = _typed(form)
        typed.pop("clientSecret", None)
        context["form"] = {"type": kind, "domains": field(form, "domains"), **typed}
    return shown_again(request, "portal_sso.html", text("portal.sso_title"), exc, **context)


# -- SCIM directory -------------------------------------------------------------------------------


async def _directory_context(
    request: web.Request, session: PortalSession, created: directories.Created | None = None
) -> dict[str, Any]:
    """The directory page's values; `created`: the directory just made, its token shown once."""
    services = directories_of(request.app)
    rows = await directories.account_directories(services, session.account_id)
    base = services.settings.public_base_url
    issued = None
    if created is not None:
        issued = {
            "scimBaseUrl": DirectoryOut.of(created.directory, base).scim_base_url,
            "token": created.token,
        }
    return {
        "session": session,
        "directories": [DirectoryOut.of(row, base).model_dump(by_alias=True) for row in rows],
        "idps": PROVIDERS,
        "issued": issued,
    }


async def directory_page(request: web.Request) -> web.Response:
    session = await _session(request, "directory")
    context = await _directory_context(request, session)
    return page(request, "portal_directory.html", title=text("portal.directory_title"), **context)


async def directory_create_post(request: web.Request, form: Form) -> web.StreamResponse:
    session = await _session(request, "directory")
    created = await directories.create_directory_in_portal(
        directories_of(request.app),
        session.account_id,
        name=field(form, "name").strip() or None,
        link_id=session.link_id,
    )
    fresh = await _directory_context(request, session, created)
    # Shown once, on this answer (no-store): not a redirect, the token is nowhere else.
    return page(request, "portal_directory.html", title=text("portal.directory_title"), **fresh)


async def directory_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    session = await _session(request, "directory")
    context = await _directory_context(request, session)
    title = text("portal.directory_title")
    return shown_again(request, "portal_directory.html", title, exc, **context)
