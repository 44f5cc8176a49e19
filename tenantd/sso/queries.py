"""Queries of SSO connections, their domains, SAML requests under way and used assertions;
each takes the connection it is given."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import func

from tenantd.accounts import queries as accounts_queries
from tenantd.db import Conn, Row, tables
from tenantd.db.predicates import affected
from tenantd.ops.queries import Purge

COLUMNS = (
    "c.id, c.account_id, c.type, c.name, c.enforce, c.default_role, c.attribute_mapping,"
    " c.group_roles, c.allow_idp_initiated, c.idp_metadata_xml, c.idp_entity_id,"
    " c.idp_sso_url, c.idp_certificate, c.issuer, c.client_id, c.client_secret_sealed,"
    " c.created_at, c.updated_at,"
    " COALESCE((SELECT array_agg(d.domain ORDER BY d.domain) FROM sso_connection_domains d"
    " WHERE d.connection_id = c.id), '{}') AS domains"
)

# Connection columns that a change may set (the service names only these).
SETTABLE = (
    "name",
    "enforce",
    "default_role",
    "attribute_mapping",
    "group_roles",
    "allow_idp_initiated",
    "idp_metadata_xml",
    "idp_entity_id",
    "idp_sso_url",
    "idp_certificate",
    "issuer",
    "client_id",
    "client_secret_sealed",
)
JSON_COLUMNS = ("attribute_mapping", "group_roles")


def _param(name: str, value: Any) -> Any:
    return orjson.dumps(value).decode() if name in JSON_COLUMNS else value


async def insert_connection(
    conn: Conn,
    *,
    connection_id: uuid.UUID,
    account_id: uuid.UUID,
    type_: str,
    values: dict[str, Any],
) -> None:
    names = [name for name in SETTABLE if name in values]
    columns = ", ".join(["id", "account_id", "type", *names])
    params = {f"v_{name}": _param(name, values[name]) for name in names}
    placeholders = ", ".join(["%(id)s", "%(a)s", "%(t)s", *(f"%(v_{name})s" for name in names)])
    await conn.execute(
        f"INSERT INTO sso_connections ({columns}) VALUES ({placeholders})",
        {"id": connection_id, "a": account_id, "t": type_, **params},
    )


async def update_connection(conn: Conn, connection_id: uuid.UUID, values: dict[str, Any]) -> None:
    names = [name for name in SETTABLE if name in values]
    sets = ", ".join([*(f"{name} = %(v_{name})s" for name in names), "updated_at = now()"])
    params = {f"v_{name}": _param(name, values[name]) for name in names}
    await conn.execute(
        f"UPDATE sso_connections SET {sets} WHERE id = %(id)s", {"id": connection_id, **params}
    )


async def connection(conn: Conn, connection_id: uuid.UUID) -> Row | None:
    """A connection of a live account (a soft-deleted account's connections sign no one in)."""
    return await conn.fetch_one(
        f"SELECT {COLUMNS} FROM sso_connections c JOIN accounts a ON a.id = c.account_id"
        " WHERE c.id = %(id)s AND a.deleted_at IS NULL",
        {"id": connection_id},
    )


async def lock_connection(
    conn: Conn, *, account_id: uuid.UUID, connection_id: uuid.UUID
) -> Row | None:
    return await conn.fetch_one(
        f"SELECT {COLUMNS} FROM sso_connections c"
        " WHERE c.id = %(id)s AND c.account_id = %(a)s FOR UPDATE",
        {"id": connection_id, "a": account_id},
    )


async def account_connections(conn: Conn, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"SELECT {COLUMNS} FROM sso_connections c WHERE c.account_id = %(a)s"
        " ORDER BY c.created_at, c.id",
        {"a": account_id},
    )


async def connection_for_domain(conn: Conn, domain: str) -> Row | None:
    """The live connection that holds an email domain (home-realm discovery)."""
    return await conn.fetch_one(
        f"SELECT {COLUMNS} FROM sso_connection_domains d"
        " JOIN sso_connections c ON c.id = d.connection_id"
        " JOIN accounts a ON a.id = c.account_id AND a.deleted_at IS NULL"
        " WHERE d.domain = %(d)s",
        {"d": domain},
    )


async def delete_connection(conn: Conn, connection_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM sso_connections WHERE id = %(id)s", {"id": connection_id})


async def take_domains(
    conn: Conn, *, connection_id: uuid.UUID, account_id: uuid.UUID, domains: Sequence[str]
) -> list[str]:
    """Give the connection exactly these domains; the ones another live connection holds
    (left out). The primary key decides between racing writers: an insert that meets a row
    being written waits for its transaction and then takes nothing."""
    await conn.execute(
        "DELETE FROM sso_connection_domains WHERE connection_id = %(c)s", {"c": connection_id}
    )
    # A soft-deleted account's connections hold no domain (as its domain claim is released).
    await conn.execute(
        "DELETE FROM sso_connection_domains d USING accounts a"
        " WHERE d.domain = ANY(%(d)s) AND a.id = d.account_id AND a.deleted_at IS NOT NULL",
        {"d": list(domains)},
    )
    rows = await conn.fetch_all(
        "INSERT INTO sso_connection_domains (domain, connection_id, account_id)"
        " SELECT unnest(%(d)s::text[]), %(c)s, %(a)s"
        " ON CONFLICT (domain) DO NOTHING RETURNING domain",
        {"d": list(domains), "c": connection_id, "a": account_id},
    )
    taken = {row["domain"] for row in rows}
    return [domain for domain in domains if domain not in taken]


async def claim_holders(conn: Conn, domains: Sequence[str]) -> dict[str, uuid.UUID]:
    """The live account claiming each domain (the domain-claim rules), where one does."""
    rows = await conn.fetch_all(
        "SELECT lower(claimed_domain) AS domain, id FROM accounts"
        " WHERE lower(claimed_domain) = ANY(%(d)s) AND deleted_at IS NULL",
        {"d": list(domains)},
    )
    return {row["domain"]: row["id"] for row in rows}


# -- sign-in ----------------------------------------------------------------------------------


async def insert_saml_request(
    conn: Conn,
    *,
    request_id: str,
    connection_id: uuid.UUID,
    binding_hash: bytes,
    return_to: str | None,
    expires_at: dt.datetime,
) -> None:
    await conn.execute(
        "INSERT INTO sso_saml_requests (id, connection_id, binding_hash, return_to, expires_at)"
        " VALUES (%(id)s, %(c)s, %(b)s, %(r)s, %(e)s)",
        {"id": request_id, "c": connection_id, "b": binding_hash, "r": return_to, "e": expires_at},
    )


async def saml_request(conn: Conn, *, request_id: str, connection_id: uuid.UUID) -> Row | None:
    """A request of this connection not answered yet and not expired."""
    return await conn.fetch_one(
        "SELECT id, binding_hash, return_to FROM sso_saml_requests WHERE id = %(id)s"
        " AND connection_id = %(c)s AND used_at IS NULL AND expires_at > now()",
        {"id": request_id, "c": connection_id},
    )


async def use_saml_request(conn: Conn, *, request_id: str, connection_id: uuid.UUID) -> bool:
    """Mark the request answered; False when it already was (single use)."""
    return await affected(
        conn,
        "UPDATE sso_saml_requests SET used_at = now() WHERE id = %(id)s AND connection_id = %(c)s"
        " AND used_at IS NULL AND expires_at > now()",
        {"id": request_id, "c": connection_id},
    )


async def remember_assertion(
    conn: Conn, *, connection_id: uuid.UUID, assertion_id: str, expires_at: dt.datetime
) -> bool:
    """Record a used assertion until its NotOnOrAfter; False when it was used before."""
    return await affected(
        conn,
        "INSERT INTO sso_saml_assertions (connection_id, assertion_id, expires_at)"
        " VALUES (%(c)s, %(id)s, %(e)s) ON CONFLICT DO NOTHING",
        {"c": connection_id, "id": assertion_id, "e": expires_at},
    )


# Memberships are the accounts package's: its query answers whether a user is a member.
is_member = accounts_queries.is_member_of_any


def expired_saml_rows() -> list[Purge]:
    """SAML requests never answered and remembered assertions past their NotOnOrAfter."""
    now = func.now()
    return [
        (tables.sso_saml_requests, tables.sso_saml_requests.c.expires_at < now),
        (tables.sso_saml_assertions, tables.sso_saml_assertions.c.expires_at < now),
    ]
