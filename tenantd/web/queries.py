"""Statements of the web package: the answers kept for Idempotency-Key (sql/0116); each takes
the connection it is given."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from psycopg2.extras import Json
from sqlalchemy import func

from tenantd.db import Conn, Row
from tenantd.db.predicates import affected
from tenantd.db.tables import api_idempotency_keys
from tenantd.ops.queries import Purge

# --- idempotency of server routes (sql/0116) ---------------------------------------------

# Take the key for this request: a fresh insert, or over a row older than the retention.
# A concurrent insert of the same key waits here until the other transaction ends.
CLAIM_IDEMPOTENCY = """
INSERT INTO api_idempotency_keys (api_key_id, route, idempotency_key, request_hash)
VALUES (%(kid)s, %(route)s, %(key)s, %(hash)s)
ON CONFLICT (api_key_id, route, idempotency_key) DO UPDATE
   SET request_hash = EXCLUDED.request_hash, response = NULL, created_at = now()
 WHERE api_idempotency_keys.created_at <= now() - make_interval(secs => %(ttl)s::float8)
"""


# The row of one answer: the API key, the route and the Idempotency-Key header.
_KEY_MATCH = "api_key_id = %(kid)s AND route = %(route)s AND idempotency_key = %(key)s"


def _key(key_id: uuid.UUID, route: str, idempotency_key: str) -> dict[str, Any]:
    """The parameters of _KEY_MATCH (and of CLAIM_IDEMPOTENCY's key)."""
    return {"kid": key_id, "route": route, "key": idempotency_key}


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
    return await affected(
        conn,
        CLAIM_IDEMPOTENCY,
        {**_key(key_id, route, idempotency_key), "hash": request_hash, "ttl": ttl_seconds},
    )


async def idempotency_row(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str
) -> Row | None:
    return await conn.fetch_one(
        f"SELECT request_hash, response FROM api_idempotency_keys WHERE {_KEY_MATCH}",
        _key(key_id, route, idempotency_key),
    )


async def store_idempotent_answer(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str, response: Any
) -> None:
    await conn.execute(
        f"UPDATE api_idempotency_keys SET response = %(response)s::jsonb WHERE {_KEY_MATCH}",
        {**_key(key_id, route, idempotency_key), "response": Json(response)},
    )


def idempotency_keys_older_than(seconds: float) -> Purge:
    """Idempotency-Key answers stored more than `seconds` ago (the idempotency sweep)."""
    table = api_idempotency_keys
    return table, table.c.created_at < func.now() - timedelta(seconds=seconds)
