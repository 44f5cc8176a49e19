"""Signing in through an account's SSO connection: start (SAML AuthnRequest or OIDC code
flow), the SAML assertion consumer service, the OIDC callback, and what both end in.

The end is one transaction: the address must be in one of the connection's domains; the user
with that address is found (or created, verified: the identity provider vouches for its own
domain); an existing user the account has no hold on (not a member, the domain not claimed by
the account) is refused, so a connection can never take over someone else's user; the user
joins the account just in time with the role its groups map to (else the connection's
default role) within the seat cap; names fill in from the mapped attributes; the session
starts with method `sso`, the only kind an enforced connection lets in.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tenantd.accounts.errors import SeatLimitReached
from tenantd.accounts.events import actor_of
from tenantd.accounts.memberships import join_within_seats
from tenantd.addresses import InvalidEmail, canonical_email, email_domain
from tenantd.auth.oauth import service as oauth
from tenantd.auth.oauth.errors import OAuthRefused
from tenantd.auth.oauth.flow import (
    STATE_COOKIE,
    STATE_TTL_SECONDS,
    FlowState,
    decode_state,
    encode_state,
    new_flow_state,
    read_email,
    safe_return_to,
)
from tenantd.db import Row
from tenantd.errors import NotFound
from tenantd.identity import queries as identity_queries
from tenantd.identity.errors import UserDisabled
from tenantd.identity.events import user_changed
from tenantd.identity.sessions import ClientMeta, IssuedTokens
from tenantd.identity.settings import OAuthProviderSettings
from tenantd.identity.signin import ProviderRedirect, start_session
from tenantd.identity.sso_policy import SSO_METHOD
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.mfa.service import AMR_FEDERATED
from tenantd.sso import errors, queries, saml
from tenantd.sso.errors import SsoRefused
from tenantd.sso.service import (
    client_secret,
    endpoints,
    find_connection,
    idp_metadata,
    oidc_redirect_uri,
)

if TYPE_CHECKING:
    from tenantd.sso.domain import Sso

log = logging.getLogger(__name__)

REQUEST_TTL_SECONDS = 600  # an AuthnRequest is answered within ten minutes or never
BINDING_COOKIE = "sso_binding"  # binds a SAML sign-in to the browser that started it

# Where the usual identity providers put each field (SAML attribute names, OIDC claims).
DEFAULT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "email": (
        "email",
        "mail",
        "emailAddress",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
        "urn:oid:0.9.2342.19200300.100.1.3",
    ),
    "firstName": (
        "firstName",
        "givenName",
        "given_name",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/givenname",
        "urn:oid:2.5.4.42",
    ),
    "lastName": (
        "lastName",
        "sn",
        "surname",
        "family_name",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/surname",
        "urn:oid:2.5.4.4",
    ),
    "groups": (
        "groups",
        "memberOf",
        "http://schemas.microsoft.com/ws/2008/06/identity/claims/groups",
    ),
}


@dataclass(frozen=True)
class SsoSignedIn:
    tokens: IssuedTokens
    device: str
    return_to: str
    user_id: uuid.UUID
    outcome: str  # returning | linked | created
    joined: bool  # a just-in-time membership was made


@dataclass(frozen=True)
class Asserted:
    """What the identity provider said about the user, before tenantd's rules."""

    email: str | None
    first_name: str
    last_name: str
    groups: tuple[str, ...]


def _pick(values: dict[str, Any], mapping: dict[str, str], field: str) -> list[str]:
    names = (mapping[field],) if mapping.get(field) else DEFAULT_ATTRIBUTES[field]
    for name in names:
        found = values.get(name)
        if found is None:
            continue
        items = found if isinstance(found, list) else [found]
        picked = [
            str(item).strip()
            for item in items
            if isinstance(item, (str, int)) and str(item).strip()
        ]
        if picked:
            return picked
    return []


def asserted(
    values: dict[str, Any], mapping: dict[str, str], *, name_id: str | None = None
) -> Asserted:
    """Read email, names and groups as the connection's attributeMapping says."""
    emails = _pick(values, mapping, "email")
    email = read_email(emails[0]) if emails else None
    if email is None and not mapping.get("email") and name_id:
        email = read_email(name_id)
    first = _pick(values, mapping, "firstName")
    last = _pick(values, mapping, "lastName")
    return Asserted(
        email=email,
        first_name=first[0][:100] if first else "",
        last_name=last[0][:100] if last else "",
        groups=tuple(_pick(values, mapping, "groups")),
    )


# Which of several mapped roles wins: admin over any custom role over member (as SCIM groups).
RANK = {"member": 1, "admin": 3}
CUSTOM_RANK = 2


def role_for(connection: Row, groups: tuple[str, ...]) -> str:
    """The highest role the user's groups map to, else the connection's default role."""
    mapped = [connection["group_roles"][g] for g in groups if g in connection["group_roles"]]
    return (
        max(mapped, key=lambda role: RANK.get(role, CUSTOM_RANK))
        if mapped
        else connection["default_role"]
    )


def cookie_path(url: str) -> str:
    """The path of a URL (a cookie's Path)."""
    return urlsplit(url).path


@dataclass(frozen=True)
class FlowCookie:
    """The cookie binding a sign-in to the browser that started it; spent at its end."""

    name: str
    path: str
    same_site: str


def saml_cookie(services: Sso, connection_id: uuid.UUID) -> FlowCookie:
    """The binding cookie of a SAML sign-in (the answer is a cross-site form POST)."""
    acs = endpoints(services.settings, connection_id).acs_url
    return FlowCookie(BINDING_COOKIE, cookie_path(acs), "None")


def oidc_cookie(services: Sso, connection_id: uuid.UUID) -> FlowCookie:
    """The state cookie of an OpenID Connect sign-in."""
    callback = oidc_redirect_uri(services.settings, connection_id)
    return FlowCookie(STATE_COOKIE, cookie_path(callback), "Lax")


# -- start ------------------------------------------------------------------------------------


async def begin(
    services: Sso, *, connection: str | None, email: str | None, return_to: str | None
) -> ProviderRedirect | None:
    """Start a sign-in through the connection of that id (a 404 when none is live), or the
    one holding the email's domain; None when no connection holds it (the password form,
    and the other ways in, are the way for this address)."""
    try:
        if connection is not None:
            found = await find_connection(services, connection_id=_connection_id(connection))
        else:
            found = await find_connection(services, email=email or "")
    except NotFound:
        if connection is not None:
            raise
        return None
    return await start(services, found, return_to=return_to)


def _connection_id(value: str) -> uuid.UUID:
    """A connection id from the query; anything else is not found."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound("No single sign-on connection") from None


async def start(services: Sso, connection: Row, *, return_to: str | None) -> ProviderRedirect:
    """Begin a sign-in through the connection: the identity provider's URL, and the cookie
    that binds the answer to this browser."""
    return_to = safe_return_to(return_to)
    if connection["type"] == "saml":
        return await _start_saml(services, connection, return_to)
    return await _start_oidc(services, connection, return_to)


async def _sp_config(
    ends: saml.Endpoints, idp: saml.IdpDescription, connection: Row
) -> saml.SPConfig:
    """The service provider's SAML configuration of the connection (built off the loop)."""
    return await asyncio.to_thread(
        saml.sp_config,
        ends,
        idp.metadata_xml,
        allow_idp_initiated=connection["allow_idp_initiated"],
    )


async def _start_saml(services: Sso, connection: Row, return_to: str | None) -> ProviderRedirect:
    settings = services.settings
    ends = endpoints(settings, connection["id"])
    idp = idp_metadata(connection)
    config = await _sp_config(ends, idp, connection)
    request_id, location = await asyncio.to_thread(
        saml.authn_request, config, idp_entity_id=idp.entity_id, relay_state=return_to or "/"
    )
    binding = new_opaque_token()
    async with services.db.connection() as conn:
        await queries.insert_saml_request(
            conn,
            request_id=request_id,
            connection_id=connection["id"],
            binding_hash=token_hash(settings.secret_key, "sso-binding:" + binding),
            return_to=return_to,
            expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=REQUEST_TTL_SECONDS),
        )
    return ProviderRedirect(
        location=location,
        cookie=BINDING_COOKIE,
        value=binding,
        path=cookie_path(ends.acs_url),
        max_age=REQUEST_TTL_SECONDS,
        same_site="None",  # the answer is a cross-site form POST from the identity provider
    )


def _provider(services: Sso, connection: Row) -> OAuthProviderSettings:
    return OAuthProviderSettings(
        name=f"sso-{connection['id']}",
        issuer=connection["issuer"],
        client_id=connection["client_id"],
        client_secret=client_secret(services.settings, connection),
    )


async def _start_oidc(services: Sso, connection: Row, return_to: str | None) -> ProviderRedirect:
    settings = services.settings
    config = _provider(services, connection)
    flow = new_flow_state(config.name, return_to)
    callback = oidc_redirect_uri(settings, connection["id"])
    try:
        location = await oauth.authorization(services.oidc, config, flow, callback=callback)
    except OAuthRefused as refused:
        raise SsoRefused(refused.code, refused.reason) from None
    return ProviderRedirect(
        location=location,
        cookie=STATE_COOKIE,
        value=encode_state(settings.secret_key, flow),
        path=cookie_path(callback),
        max_age=STATE_TTL_SECONDS,
        same_site="Lax",
    )


# -- SAML assertion consumer service ----------------------------------------------------------


async def consume_saml(
    services: Sso,
    connection_id: uuid.UUID,
    *,
    form: Mapping[str, str],
    binding: str | None,
    client: ClientMeta,
) -> SsoSignedIn:
    """Verify an answer posted to the ACS (the HTTP-POST binding's form: SAMLResponse,
    RelayState) and sign its user in; SsoRefused otherwise."""
    saml_response, relay_state = form.get("SAMLResponse", ""), form.get("RelayState")
    settings = services.settings
    async with services.db.connection() as conn:
        connection = await queries.connection(conn, connection_id)
        if connection is None or connection["type"] != "saml":
            raise SsoRefused(errors.SAML_INVALID, "no live SAML connection of this id")
        try:
            request_id = saml.in_response_to(saml_response)
        except saml.SamlRefused as refused:
            raise SsoRefused(errors.SAML_INVALID, refused.reason) from None
        request = (
            await queries.saml_request(conn, request_id=request_id, connection_id=connection_id)
            if request_id
            else None
        )
    if request_id is None and not connection["allow_idp_initiated"]:
        raise SsoRefused(errors.UNSOLICITED, "IdP-initiated sign-in is off for this connection")
    if request_id is not None:
        if request is None:
            raise SsoRefused(errors.SAML_REPLAYED, "InResponseTo names no open request of ours")
        expected = bytes(request["binding_hash"])
        presented = token_hash(settings.secret_key, "sso-binding:" + (binding or ""))
        if not binding or not hmac.compare_digest(expected, presented):
            raise SsoRefused(
                errors.SAML_INVALID, "answer reached another browser than the one that asked"
            )
    config = await _sp_config(
        endpoints(settings, connection_id), idp_metadata(connection), connection
    )
    outstanding = (
        {request_id: request["return_to"] or "/"} if request is not None and request_id else {}
    )
    try:
        identity = await asyncio.to_thread(
            saml.read_response, config, saml_response, outstanding=outstanding
        )
    except saml.SamlRefused as refused:
        raise SsoRefused(errors.SAML_INVALID, refused.reason) from None
    # Single use, committed whatever the sign-in's outcome: a replay is refused even after a
    # refusal (no seat, foreign user).
    async with services.db.transaction() as conn:
        if request_id is not None and not await queries.use_saml_request(
            conn, request_id=request_id, connection_id=connection_id
        ):
            raise SsoRefused(errors.SAML_REPLAYED, "the request was answered before")
        if not await queries.remember_assertion(
            conn,
            connection_id=connection_id,
            assertion_id=identity.assertion_id,
            expires_at=identity.not_on_or_after,
        ):
            raise SsoRefused(errors.SAML_REPLAYED, "assertion used before")
    if request is not None:
        return_to = request["return_to"] or "/"
    else:
        # IdP-initiated (allowed): RelayState may name a same-origin path, nothing else.
        return_to = safe_return_to(relay_state) or "/"
    who = asserted(identity.attributes, connection["attribute_mapping"], name_id=identity.name_id)
    return await sign_in(services, connection, who, client=client, return_to=return_to)


# -- OpenID Connect callback ------------------------------------------------------------------


async def complete_oidc(
    services: Sso,
    connection_id: uuid.UUID,
    *,
    params: oauth.CallbackParams,
    state_cookie: str | None,
    client: ClientMeta,
) -> SsoSignedIn:
    """Finish the code flow of an OIDC connection (today's OIDC sign-in code) and sign in."""
    settings = services.settings
    async with services.db.connection() as conn:
        connection = await queries.connection(conn, connection_id)
    if connection is None or connection["type"] != "oidc":
        raise SsoRefused(errors.SAML_INVALID, "no live OIDC connection of this id")
    config = _provider(services, connection)
    try:
        flow: FlowState = decode_state(settings.secret_key, state_cookie, provider=config.name)
        identity = await oauth.identify(
            services,
            services.oidc,
            config,
            flow=flow,
            params=params,
            callback=oidc_redirect_uri(settings, connection_id),
        )
    except OAuthRefused as refused:
        raise SsoRefused(refused.code, refused.reason) from None
    # The connection's provider is the authority for its own domains (checked in sign_in):
    # only an explicit `email_verified: false` is refused (Entra ID sends no such claim).
    if not identity.email_verified and identity.claims.get("email_verified") is not None:
        raise SsoRefused("email_not_verified", "the provider does not vouch for the email")
    claims = dict(identity.claims)
    claims.setdefault("email", identity.email)
    claims.setdefault("given_name", identity.given_name)
    claims.setdefault("family_name", identity.family_name)
    who = asserted(claims, connection["attribute_mapping"])
    return await sign_in(services, connection, who, client=client, return_to=flow.return_to or "/")


# -- the end of both --------------------------------------------------------------------------


async def sign_in(
    services: Sso, connection: Row, who: Asserted, *, client: ClientMeta, return_to: str
) -> SsoSignedIn:
    """The user of a verified assertion or ID token: found or created, joined just in time
    within the seat cap, signed in with method `sso` (module docstring)."""
    if who.email is None:
        raise SsoRefused(errors.EMAIL_MISSING, "no usable email address")
    try:
        email = canonical_email(who.email)
    except InvalidEmail:
        raise SsoRefused(errors.EMAIL_MISSING, "the email is not a valid address") from None
    domain = email_domain(email)
    if domain not in connection["domains"]:
        raise SsoRefused(errors.DOMAIN_MISMATCH, "the address is not in the connection's domains")
    account_id: uuid.UUID = connection["account_id"]
    role = role_for(connection, who.groups)
    try:
        async with services.db.transaction() as conn:
            outcome = "returning"
            created = await identity_queries.insert_user(
                conn, email=email, first_name=who.first_name, last_name=who.last_name
            )
            user = await identity_queries.lock_user_by_email(conn, email)
            assert user is not None  # inserted above, or the row the insert conflicted on
            user_id: uuid.UUID = user["id"]
            if created is not None:
                outcome = "created"
                await user_changed(conn, "user.created", user_id)
            elif not await _has_hold(conn, connection, user_id, domain):
                raise SsoRefused(
                    errors.IDENTITY_CONFLICT,
                    "an existing user who is not a member of the connection's account",
                )
            if await identity_queries.claim_unverified_user(conn, user_id):
                outcome = "linked" if outcome == "returning" else outcome
                await user_changed(
                    conn, "user.email_verified", user_id, previous={"emailVerified": False}
                )
            if (
                created is None
                and not (user["first_name"] or user["last_name"])
                and (who.first_name or who.last_name)
            ):
                await identity_queries.set_names(
                    conn, user_id=user_id, first_name=who.first_name, last_name=who.last_name
                )
            joined = await join_within_seats(
                conn,
                account_id=account_id,
                user_id=user_id,
                role=role,
                actor=actor_of(user_id),
                actor_user_id=user_id,
                via={"via": "sso"},
            )
            started = await start_session(
                services.identity,
                conn,
                user_id=user_id,
                account_id=account_id,
                client=client,
                method=SSO_METHOD,
                amr=(AMR_FEDERATED,),
            )
    except SeatLimitReached:
        raise SsoRefused(errors.SEAT_LIMIT, "no free seat for a just-in-time member") from None
    except UserDisabled:
        raise SsoRefused(errors.USER_DISABLED, "an operator disabled the user") from None
    log.info(
        "sso sign-in %s",
        outcome,
        extra={
            "sso": {
                "connection": str(connection["id"]),
                "user_id": str(user_id),
                "joined": joined.created,
            }
        },
    )
    return SsoSignedIn(
        tokens=started.tokens,
        device=started.device,
        return_to=return_to,
        user_id=user_id,
        outcome=outcome,
        joined=joined.created,
    )


async def _has_hold(conn: Any, connection: Row, user_id: uuid.UUID, domain: str) -> bool:
    """Whether the connection's account may sign this existing user in: a member already, or
    the account claims the domain (the domain-claim rules)."""
    if await queries.is_member(conn, account_id=connection["account_id"], user_id=user_id):
        return True
    holders = await queries.claim_holders(conn, [domain])
    return holders.get(domain) == connection["account_id"]
