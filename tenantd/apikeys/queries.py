"""Statements of the api_keys table (and the audit row a key's change leaves); each takes the
connection it is given. The lookup is on every cache miss of the guard, so it is prepared."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.db.fetch import fetch_row

KEY_BY_ID = Prepared(
    "tenantd_api_key_by_id",
    "SELECT id, name, scopes, secret_hash, revoked_at IS NOT NULL AS revoked"
    " FROM api_keys WHERE id = %(id)s::uuid",
)

# At most one write a minute per key, whichever instance gets there first.
TOUCH = Prepared(
    "tenantd_api_key_touch",
    "UPDATE api_keys SET last_used_at = now()"
    " WHERE id = %(id)s::uuid AND revoked_at IS NULL"
    " AND (last_used_at IS NULL"
    "      OR last_used_at < now() - make_interval(secs => %(every)s::float8))",
)


async def key_by_id(conn: Conn, key_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one(KEY_BY_ID, {"id": key_id})


async def touch(conn: Conn, key_id: uuid.UUID, *, every_seconds: float) -> None:
    await conn.execute(TOUCH, {"id": key_id, "every": every_seconds})


async def insert_key(
    conn: Conn,
    *,
    key_id: uuid.UUID,
    name: str,
    scopes: Sequence[str],
    secret_hash: bytes,
    created_by: str | None,
) -> Row:
    return await fetch_row(
        conn,
        "INSERT INTO api_keys (id, name, scopes, secret_hash, created_by)"
        " VALUES (%(id)s, %(name)s, %(scopes)s::text[], %(hash)s, %(by)s)"
        " RETURNING id, name, scopes, created_by, created_at",
        {"id": key_id, "name": name, "scopes": list(scopes), "hash": secret_hash, "by": created_by},
    )


async def list_keys(conn: Conn, *, include_revoked: bool) -> list[Row]:
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    return await conn.fetch_all(
        "SELECT id, name, scopes, created_by, created_at, last_used_at, revoked_at"
        f" FROM api_keys{where} ORDER BY created_at, id"
    )


async def revoke_key(conn: Conn, key_id: uuid.UUID) -> Row | None:
    """Set revoked_at once; the row as it is now (None: no such key)."""
    return await conn.fetch_one(
        "WITH revoked AS ("
        "  UPDATE api_keys SET revoked_at = now()"
        "   WHERE id = %(id)s AND revoked_at IS NULL RETURNING revoked_at"
        ") SELECT k.id, k.name,"
        "         coalesce((SELECT revoked_at FROM revoked), k.revoked_at) AS revoked_at,"
        "         EXISTS (SELECT 1 FROM revoked) AS changed"
        "   FROM api_keys k WHERE k.id = %(id)s",
        {"id": key_id},
    )
