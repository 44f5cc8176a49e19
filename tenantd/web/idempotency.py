"""Idempotency of server routes: a retried request with the same `Idempotency-Key` (same API
key, same route) gets the first answer back for 24 hours, and concurrent duplicates are
answered once.

Use it inside the transaction of the work: `claim` first (None: do the work, then
`remember` the answer in the same transaction), else it returns the first answer. A
duplicate that arrives while the first is still running waits in `claim` for that
transaction: after a commit it gets the stored answer; after a rollback (the first failed)
it does the work itself. Only successful answers are kept: a refused request may be retried.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import orjson

from tenantd.db import Conn
from tenantd.errors import Conflict
from tenantd.web import queries

TTL_SECONDS = 24 * 3600.0
KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, no space (as Stripe and IETF use it)


class IdempotencyKeyReused(Conflict):
    code = "IDEMPOTENCY_KEY_REUSED"
    message = "This Idempotency-Key was used with a different request"


def fingerprint(body: Any) -> bytes:
    """SHA-256 of a request body's JSON form (keys sorted)."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


async def claim(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str, request_hash: bytes
) -> Any | None:
    """None: this request goes ahead. Otherwise the first request's answer (409 when the
    key came with another body)."""
    if await queries.claim_idempotency(
        conn,
        key_id=key_id,
        route=route,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        ttl_seconds=TTL_SECONDS,
    ):
        return None
    row = await queries.idempotency_row(
        conn, key_id=key_id, route=route, idempotency_key=idempotency_key
    )
    if row is not None and bytes(row["request_hash"]) != request_hash:
        raise IdempotencyKeyReused()
    if row is None or row["response"] is None:  # not committed with an answer: never expected
        raise Conflict("The first request with this Idempotency-Key has no answer yet")
    return row["response"]


async def remember(
    conn: Conn, *, key_id: uuid.UUID, route: str, idempotency_key: str, response: Any
) -> None:
    """Keep the answer of a claimed key (in the claiming transaction)."""
    await queries.store_idempotent_answer(
        conn, key_id=key_id, route=route, idempotency_key=idempotency_key, response=response
    )
