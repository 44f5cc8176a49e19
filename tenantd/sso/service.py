"""SSO connections of an account: add, list, change, remove (owner or admin).

Rules kept here: a connection is SAML (the identity provider as metadata XML, or entity id +
SSO URL + PEM certificate) or OpenID Connect (issuer, client id, client secret, the secret
sealed at rest); each domain is a well-formed, non-public email domain that no other live
account claims and no other live connection holds (sso_connection_domains' primary key, so
racing writers cannot both take one); switching `enforce` on ends the sessions of other kinds
of the users it binds (identity/sso_policy.py). Every change writes an audit row and an
outbox event (`sso_connection.created|updated|deleted`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tenantd import audit, crypto
from tenantd.accounts import roles
from tenantd.accounts.domains import PUBLIC_EMAIL_DOMAINS
from tenantd.accounts.service import check_permitted, lock_live_account, lock_scoped, read_scoped
from tenantd.addresses import email_domain
from tenantd.db import Conn, Row
from tenantd.errors import NotFound, ValidationFailed
from tenantd.identity import permissions, sso_policy
from tenantd.outbox import Actor, emit, payload
from tenantd.settings import Settings
from tenantd.sso import queries, saml
from tenantd.sso.domain import Sso
from tenantd.sso.errors import DomainTaken
from tenantd.sso.schemas import ConnectionChange, ConnectionCreate

if TYPE_CHECKING:
    from tenantd.principal import Principal

CLIENT_SECRET_INFO = b"tenantd/sso/oidc-client-secret/v1"
EVENT_FIELDS = (
    "id", "account_id", "type", "name", "domains", "enforce", "default_role",
    "allow_idp_initiated", "created_at", "updated_at",
)  # fmt: skip


def seal_secret(settings: Settings, connection_id: uuid.UUID, secret: str) -> bytes:
    return crypto.seal(
        settings.secret_key, CLIENT_SECRET_INFO, secret.encode(), associated=connection_id.bytes
    )


def client_secret(settings: Settings, row: Row) -> str:
    """The OIDC client secret of a connection (UndecryptableSecret with another SECRET_KEY)."""
    return crypto.unseal(
        settings.secret_key,
        CLIENT_SECRET_INFO,
        row["client_secret_sealed"],
        associated=row["id"].bytes,
    ).decode()


def endpoints(settings: Settings, connection_id: uuid.UUID) -> saml.Endpoints:
    return saml.endpoints(settings.public_base_url, str(connection_id))


def oidc_redirect_uri(settings: Settings, connection_id: uuid.UUID) -> str:
    return f"{settings.public_base_url}/sso/oidc/{connection_id}/callback"


def idp_metadata(row: Row) -> saml.IdpDescription:
    """The identity provider of a stored SAML connection."""
    if row["idp_metadata_xml"]:
        return saml.idp_from_metadata(row["idp_metadata_xml"])
    return saml.idp_from_parts(row["idp_entity_id"], row["idp_sso_url"], row["idp_certificate"])


# -- validation -------------------------------------------------------------------------------


def normal_domains(domains: list[str]) -> list[str]:
    """Each domain in the normal form of addresses (IDNA, lower case), once; a malformed or
    public one is a validation error."""
    result: list[str] = []
    for given in domains:
        domain = email_domain(f"x@{given.strip().lstrip('@')}")
        if not domain or "." not in domain or domain.startswith(".") or domain.endswith("."):
            raise ValidationFailed({"domains": f"{given!r} is not an email domain"})
        if domain in PUBLIC_EMAIL_DOMAINS:
            raise ValidationFailed(
                {"domains": f"{domain} is a public email domain: no account can hold it"}
            )
        if domain not in result:
            result.append(domain)
    return result


def _url(value: str, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ValidationFailed({field: "must be an absolute http(s) URL"})
    return value


async def _saml_values(settings: Settings, connection_id: uuid.UUID, body: Any) -> dict[str, Any]:
    """The identity provider columns of a SAML body: metadata XML, or the three parts."""
    parts = (body.idp_entity_id, body.idp_sso_url, body.idp_certificate)
    if body.idp_metadata_xml is not None and any(p is not None for p in parts):
        raise ValidationFailed(
            {"idpMetadataXml": "give idpMetadataXml, or idpEntityId + idpSsoUrl + idpCertificate"}
        )
    try:
        if body.idp_metadata_xml is not None:
            described = saml.idp_from_metadata(body.idp_metadata_xml)
            values = {
                "idp_metadata_xml": body.idp_metadata_xml,
                "idp_entity_id": described.entity_id,
                "idp_sso_url": described.sso_url,
                "idp_certificate": None,
            }
        elif all(p is not None for p in parts):
            _url(body.idp_sso_url, "idpSsoUrl")
            described = saml.idp_from_parts(*parts)
            values = {
                "idp_metadata_xml": None,
                "idp_entity_id": body.idp_entity_id,
                "idp_sso_url": body.idp_sso_url,
                "idp_certificate": body.idp_certificate.strip() + "\n",
            }
        else:
            missing = [
                name
                for name, value in zip(
                    ("idpEntityId", "idpSsoUrl", "idpCertificate"), parts, strict=True
                )
                if value is None
            ]
            raise ValidationFailed({name: "required for a SAML connection" for name in missing})
        # Load it as a sign-in will (pysaml2, in a worker thread: it may call xmlsec1).
        await asyncio.to_thread(
            saml.check_metadata, endpoints(settings, connection_id), described.metadata_xml
        )
    except saml.InvalidIdp as exc:
        field = "idpMetadataXml" if body.idp_metadata_xml is not None else "idpCertificate"
        raise ValidationFailed({field: str(exc)}) from None
    return values


def _refuse_foreign(body: Any, type_: str) -> None:
    saml_only = {
        "idpMetadataXml": body.idp_metadata_xml,
        "idpEntityId": body.idp_entity_id,
        "idpSsoUrl": body.idp_sso_url,
        "idpCertificate": body.idp_certificate,
        "allowIdpInitiated": body.allow_idp_initiated or None,
    }
    oidc_only = {
        "issuer": body.issuer,
        "clientId": body.client_id,
        "clientSecret": body.client_secret,
    }
    foreign = oidc_only if type_ == "saml" else saml_only
    given = {name: f"not a field of a {type_} connection" for name, v in foreign.items() if v}
    if given:
        raise ValidationFailed(given)


def _common(body: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in ("name", "enforce", "default_role", "group_roles", "allow_idp_initiated"):
        value = getattr(body, name)
        if value is not None:
            values[name] = value
    if body.attribute_mapping is not None:
        values["attribute_mapping"] = body.attribute_mapping.model_dump(
            by_alias=True, exclude_none=True
        )
    return values


async def _check_roles(conn: Conn, account: Row, values: dict[str, Any]) -> None:
    """`defaultRole` and each `groupRoles` value: a role key of the locked account other than
    owner (admin, member or a custom role), no wider than the caller's own role (422/403)."""
    if "default_role" in values:
        await roles.assignable(conn, account, values["default_role"], field_name="defaultRole")
    for group, key in (values.get("group_roles") or {}).items():
        await roles.assignable(conn, account, key, field_name=f"groupRoles.{group}")


# -- reads ------------------------------------------------------------------------------------


async def list_connections(services: Sso, actor: Principal, account_id: uuid.UUID) -> list[Row]:
    """The account's connections (owner or admin)."""
    return await read_scoped(
        services, actor, account_id, permissions.SSO_MANAGE, queries.account_connections
    )


async def find_connection(
    services: Sso, *, connection_id: uuid.UUID | None = None, email: str | None = None
) -> Row:
    """The live connection named, or the one holding the address's domain; else 404."""
    async with services.db.connection() as conn:
        if connection_id is not None:
            found = await queries.connection(conn, connection_id)
        else:
            domain = email_domain(email or "")
            found = await queries.connection_for_domain(conn, domain) if domain else None
    if found is None:
        raise NotFound("No single sign-on connection")
    return found


async def sp_metadata(services: Sso, connection_id: uuid.UUID) -> str:
    """The service provider metadata of a live SAML connection (for its IdP); else 404."""
    connection = await find_connection(services, connection_id=connection_id)
    if connection["type"] != "saml":
        raise NotFound("No SAML connection of this id")
    idp = idp_metadata(connection)
    config = await asyncio.to_thread(
        saml.sp_config,
        endpoints(services.settings, connection["id"]),
        idp.metadata_xml,
        allow_idp_initiated=connection["allow_idp_initiated"],
    )
    return await asyncio.to_thread(saml.sp_metadata, config)


# -- changes ----------------------------------------------------------------------------------


async def _take_domains(
    conn: Conn, *, connection_id: uuid.UUID, account_id: uuid.UUID, domains: list[str]
) -> None:
    holders = await queries.claim_holders(conn, domains)
    foreign = [d for d in domains if holders.get(d, account_id) != account_id]
    if foreign:
        raise DomainTaken(foreign[0], "another account has claimed this domain")
    taken = await queries.take_domains(
        conn, connection_id=connection_id, account_id=account_id, domains=domains
    )
    if taken:
        raise DomainTaken(taken[0], "another single sign-on connection holds this domain")


@dataclass(frozen=True)
class By:
    """Who changes a connection: a member (`user_id`), or the admin portal (no user; `via`
    names its link) acting on the one account its session is bound to."""

    user_id: uuid.UUID | None
    actor: Actor
    via: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def member(cls, principal: Principal) -> By:
        return cls(principal.user_id, Actor.user(principal.user_id))


# Locks the live account and checks the caller may give the roles in `values` (the member's
# guard, or the portal's): each caller passes its own, so the portal reaches no permission.
Guard = Callable[[Conn, dict[str, Any]], Awaitable[None]]


async def _changed(
    conn: Conn,
    by: By,
    kind: str,
    row: Row,
    *,
    previous: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    await audit.record(
        conn,
        account_id=row["account_id"],
        actor_user_id=by.user_id,
        action=f"sso_connection.{kind}",
        target=str(row["id"]),
        data={
            **(
                data
                or {"type": row["type"], "domains": list(row["domains"]), "enforce": row["enforce"]}
            ),
            **by.via,
        },
    )
    await emit(
        conn,
        f"sso_connection.{kind}",
        account_id=row["account_id"],
        actor=by.actor,
        data=payload(row, EVENT_FIELDS),
        previous=previous,
    )


def _member_guard(actor: Principal, account_id: uuid.UUID) -> Guard:
    async def guard(conn: Conn, values: dict[str, Any]) -> None:
        account = await lock_scoped(conn, actor, account_id, permissions.SSO_MANAGE)
        await _check_roles(conn, account, values)

    return guard


def _portal_guard(account_id: uuid.UUID) -> Guard:
    async def guard(conn: Conn, values: dict[str, Any]) -> None:
        await lock_live_account(conn, account_id)
        keys = {"defaultRole": values.get("default_role")} | {
            f"groupRoles.{group}": key for group, key in (values.get("group_roles") or {}).items()
        }
        for name, key in keys.items():
            if key is not None and not await roles.is_role_of(conn, account_id, key):
                raise ValidationFailed({name: "a role key of the account other than owner"})

    return guard


async def create_connection(
    services: Sso, actor: Principal, account_id: uuid.UUID, body: ConnectionCreate
) -> Row:
    """Add a connection (owner or admin)."""
    return await _create(
        services, account_id, body, _member_guard(actor, account_id), By.member(actor)
    )


async def create_connection_in_portal(
    services: Sso,
    account_id: uuid.UUID,
    body: ConnectionCreate,
    *,
    link_id: uuid.UUID,
    connection_id: uuid.UUID,
) -> Row:
    """Add a connection through the admin portal (its session is bound to the account) with
    the id whose service-provider values the portal's page already showed."""
    return await _create(
        services,
        account_id,
        body,
        _portal_guard(account_id),
        portal_by(link_id),
        connection_id=connection_id,
    )


def portal_by(link_id: uuid.UUID) -> By:
    return By(
        None,
        Actor.system(f"admin_portal:{link_id}"),
        {"via": "admin_portal", "portalLinkId": str(link_id)},
    )


async def _create(
    services: Sso,
    account_id: uuid.UUID,
    body: ConnectionCreate,
    guard: Guard,
    by: By,
    *,
    connection_id: uuid.UUID | None = None,
) -> Row:
    settings = services.settings
    connection_id = connection_id or uuid.uuid4()
    domains = normal_domains(body.domains)
    _refuse_foreign(body, body.type)
    values = _common(body)
    if body.type == "saml":
        values.update(await _saml_values(settings, connection_id, body))
    else:
        missing = {
            name: "required for an oidc connection"
            for name, value in (
                ("issuer", body.issuer),
                ("clientId", body.client_id),
                ("clientSecret", body.client_secret),
            )
            if not value
        }
        if missing:
            raise ValidationFailed(missing)
        assert body.issuer and body.client_id and body.client_secret
        values["issuer"] = _url(body.issuer, "issuer").rstrip("/")
        values["client_id"] = body.client_id
        values["client_secret_sealed"] = seal_secret(settings, connection_id, body.client_secret)
    async with services.db.transaction() as conn:
        await guard(conn, values)
        await queries.insert_connection(
            conn, connection_id=connection_id, account_id=account_id, type_=body.type, values=values
        )
        await _take_domains(
            conn, connection_id=connection_id, account_id=account_id, domains=domains
        )
        if body.enforce:
            await sso_policy.end_other_sessions(conn, connection_id)
        row = await queries.lock_connection(
            conn, account_id=account_id, connection_id=connection_id
        )
        assert row is not None
        await _changed(conn, by, "created", row)
    return row


async def update_connection(
    services: Sso,
    actor: Principal,
    account_id: uuid.UUID,
    connection_id: uuid.UUID,
    body: ConnectionChange,
) -> Row:
    """Change a connection (owner or admin); enforcement switched on ends other sessions."""
    async with services.db.connection() as conn:
        await check_permitted(conn, actor, account_id, permissions.SSO_MANAGE)
    guard = _member_guard(actor, account_id)
    return await _update(services, account_id, connection_id, body, guard, By.member(actor))


async def update_connection_in_portal(
    services: Sso,
    account_id: uuid.UUID,
    connection_id: uuid.UUID,
    body: ConnectionChange,
    *,
    link_id: uuid.UUID,
) -> Row:
    """Change a connection of the portal session's account."""
    guard = _portal_guard(account_id)
    return await _update(services, account_id, connection_id, body, guard, portal_by(link_id))


async def account_connections(services: Sso, account_id: uuid.UUID) -> list[Row]:
    """The account's connections, for the admin portal (its session is the check)."""
    async with services.db.connection() as conn:
        return await queries.account_connections(conn, account_id)


async def _update(
    services: Sso,
    account_id: uuid.UUID,
    connection_id: uuid.UUID,
    body: ConnectionChange,
    guard: Guard,
    by: By,
) -> Row:
    settings = services.settings
    async with services.db.connection() as conn:
        current = await queries.lock_connection(
            conn, account_id=account_id, connection_id=connection_id
        )
    domains = normal_domains(body.domains) if body.domains is not None else None
    if current is None:
        raise NotFound("No such single sign-on connection")
    _refuse_foreign(body, current["type"])
    values = _common(body)
    if current["type"] == "saml":
        if any(
            v is not None
            for v in (
                body.idp_metadata_xml,
                body.idp_entity_id,
                body.idp_sso_url,
                body.idp_certificate,
            )
        ):
            values.update(await _saml_values(settings, connection_id, body))
    else:
        if body.issuer is not None:
            values["issuer"] = _url(body.issuer, "issuer").rstrip("/")
        if body.client_id is not None:
            values["client_id"] = body.client_id
        if body.client_secret is not None:
            values["client_secret_sealed"] = seal_secret(
                settings, connection_id, body.client_secret
            )
    async with services.db.transaction() as conn:
        await guard(conn, values)
        before = await queries.lock_connection(
            conn, account_id=account_id, connection_id=connection_id
        )
        if before is None:
            raise NotFound("No such single sign-on connection")
        await queries.update_connection(conn, connection_id, values)
        if domains is not None:
            await _take_domains(
                conn, connection_id=connection_id, account_id=account_id, domains=domains
            )
        row = await queries.lock_connection(
            conn, account_id=account_id, connection_id=connection_id
        )
        assert row is not None
        if row["enforce"] and (not before["enforce"] or domains is not None):
            # Switched on, or on over new domains: only SSO sessions remain for its users.
            await sso_policy.end_other_sessions(conn, connection_id)
        previous = {
            key: before[key]
            for key in ("name", "enforce", "default_role", "allow_idp_initiated", "domains")
            if before[key] != row[key]
        }
        await _changed(conn, by, "updated", row, previous=payload(previous))
    return row


async def delete_connection(
    services: Sso, actor: Principal, account_id: uuid.UUID, connection_id: uuid.UUID
) -> None:
    """Remove a connection and free its domains (owner or admin)."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.SSO_MANAGE)
        row = await queries.lock_connection(
            conn, account_id=account_id, connection_id=connection_id
        )
        if row is None:
            raise NotFound("No such single sign-on connection")
        await queries.delete_connection(conn, connection_id)
        await _changed(conn, By.member(actor), "deleted", row)


@dataclass(frozen=True)
class Described:
    """A connection as the API answers it (the view's serialiser)."""

    row: Row
    settings: Settings

    def as_dict(self) -> dict[str, Any]:
        row, settings = self.row, self.settings
        out: dict[str, Any] = {
            key: row[key]
            for key in (
                "id", "account_id", "type", "name", "enforce", "default_role",
                "attribute_mapping", "group_roles", "allow_idp_initiated", "created_at",
                "updated_at",
            )
        }  # fmt: skip
        out["domains"] = list(row["domains"])
        out["start_url"] = f"{settings.public_base_url}/sso/start?connection={row['id']}"
        if row["type"] == "saml":
            ends = endpoints(settings, row["id"])
            out.update(
                idp_entity_id=row["idp_entity_id"],
                idp_sso_url=row["idp_sso_url"],
                sp_entity_id=ends.entity_id,
                acs_url=ends.acs_url,
                metadata_url=ends.entity_id,
            )
        else:
            out.update(
                issuer=row["issuer"],
                client_id=row["client_id"],
                redirect_uri=oidc_redirect_uri(settings, row["id"]),
            )
        return out
