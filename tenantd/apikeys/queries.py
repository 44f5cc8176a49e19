"""Statements of the api_keys table (and the audit row a key's change leaves); each takes the
connection it is given. The lookup is on every cache miss of the guard, so it is prepared."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from psycopg2.extras import Json
from sqlalchemy import func

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.db.tables import api_idempotency_keys
from tenantd.ops.queries import Purge

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
    row = await conn.fetch_one(
        "INSERT INTO api_keys (id, name, scopes, secret_hash, created_by)"
        " VALUES (%(id)s, %(name)s, %(scopes)s::text[], %(hash)s, %(by)s)"
        " RETURNING id, name, scopes, created_by, created_at",
        {"id": key_id, "name": name, "scopes": list(scopes), "hash": secret_hash, "by": created_by},
    )
    assert row is not None
    return row


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


# --- idempotency of server routes (sql/0116) ---------------------------------------------

# Take the key for this request: a fresh insert, or over a row older than the retention.
# A concurrent insert of the same key waits here until the other transaction ends.
CLAIM_IDEMPOTENCY = """
INSERT INTO api_idempotency_keys (api_key_id, route, idempotency_key, request_hash)
VALUES (%(kid)s, %(route)s, %(key)s, %(hash)s)
ON CONFLICT (api_key_id, route, idempotency_key) DO UPDATE
   SET request_hash = EXCLUDED.request_hash, response = NULL, created_at = now()
 WHERE api_idempotency_keys.created_at <= now() - make_interval(secs => %(ttl)s::float8)
RETURNING true
"""


async def claim_idempotency(
    conn: Conn,
    *,
    key_id: uuid.UUID,
    route: str,
    idempotency_key: str,
    request_hash: bytes,
    ttl_seconds: float,
) -> bool:
    """True when this request holds the key now (the first, or the first after expiry)."""
    claimed = await conn.fetch_val(
        CLAIM_IDEMPOTENCY,
        {
            "kid": key_id,
            "route": route,
            "key": idempotency_key,
            "hash": request_hash,
            "ttl": ttl_seconds,
        },
    )
    return bool(claimed)


async def idempotency_row(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str
) -> Row | None:
    return await conn.fetch_one(
        "SELECT request_hash, response FROM api_idempotency_keys"
        " WHERE api_key_id = %(kid)s AND route = %(route)s AND idempotency_key = %(key)s",
        {"kid": key_id, "route": route, "key": idempotency_key},
    )


async def store_idempotent_answer(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str, response: Any
) -> None:
    await conn.execute(
        "UPDATE api_idempotency_keys SET response = %(response)s::jsonb"
        " WHERE api_key_id = %(kid)s AND route = %(route)s AND idempotency_key = %(key)s",
        {"kid": key_id, "route": route, "key": idempotency_key, "response": Json(response)},
    )


def idempotency_keys_older_than(seconds: float) -> Purge:
    """Idempotency-Key answers stored more than `seconds` ago (the idempotency sweep)."""
    table = api_idempotency_keys
    return table, table.c.created_at < func.now() - timedelta(seconds=seconds)
