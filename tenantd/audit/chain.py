"""The audit chain recomputed outside the database: `tenantd audit verify` and export.

canonical(row) is the byte string sql/0106 hashes ('tenantd.audit.v1', then each field as
'~' for NULL or '<UTF-8 byte length>:<text>'); row_hash = sha256(prev_hash || canonical).
The first row of an account follows 32 zero bytes. Any change to a row's fields breaks its
own hash; a removed or reordered row breaks the link of the row after it. (Removing the
newest rows leaves a shorter valid chain: compare the printed head with one kept elsewhere.)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from tenantd.audit import queries
from tenantd.db import Database, Row

GENESIS = bytes(32)
VERSION = "tenantd.audit.v1"
BATCH = 2000


def _field(value: str | None) -> str:
    if value is None:
        return "~"
    return f"{len(value.encode())}:{value}"


def stamp(created_at: dt.datetime) -> str:
    return created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(row: Row) -> bytes:
    """The serialisation the chain hashes (keep in step with tenantd_audit_canonical)."""
    parts = [
        str(row["id"]),
        None if row["account_id"] is None else str(row["account_id"]),
        None if row["actor_user_id"] is None else str(row["actor_user_id"]),
        row["action"],
        row["target"],
        row["data_text"],
        stamp(row["created_at"]),
    ]
    return (VERSION + "".join(_field(p) for p in parts)).encode()


def row_hash(prev_hash: bytes, row: Row) -> bytes:
    return hashlib.sha256(prev_hash + canonical(row)).digest()


@dataclass
class Broken:
    row_id: int
    account_id: uuid.UUID | None
    reason: str


@dataclass
class Verification:
    rows: int = 0
    heads: dict[uuid.UUID | None, bytes] = field(default_factory=dict)
    broken: Broken | None = None


async def stream(
    db: Database,
    *,
    account_id: uuid.UUID | None,
    all_accounts: bool,
    since: dt.datetime | None = None,
    batch: int = BATCH,
) -> AsyncIterator[Row]:
    """Rows in id order, fetched in keyset batches (memory stays flat on a large log)."""
    after = 0
    while True:
        async with db.connection() as conn:
            rows = await queries.fetch(
                conn,
                queries.chain_batch(
                    account_id=account_id,
                    all_accounts=all_accounts,
                    after_id=after,
                    since=since,
                    limit=batch,
                ),
            )
        for row in rows:
            yield row
        if len(rows) < batch:
            return
        after = rows[-1]["id"]


async def verify(
    db: Database,
    *,
    account_id: uuid.UUID | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = BATCH,
) -> Verification:
    """Recompute every chain (or one account's); stop at the first broken row."""
    result = Verification()
    rows = stream(db, account_id=account_id, all_accounts=account_id is None, batch=batch)
    async for row in rows:
        key = row["account_id"]
        expected_prev = result.heads.get(key, GENESIS)
        stored_prev = bytes(row["prev_hash"])
        stored = bytes(row["row_hash"])
        reason = None
        if stored_prev != expected_prev:
            reason = (
                "its link to the previous row does not match (a row before it was removed,"
                " reordered or altered)"
                if key in result.heads
                else "the account's first row does not start the chain (earlier rows are missing)"
            )
        elif row_hash(stored_prev, row) != stored:
            reason = "its content does not match its hash (the row was altered)"
        if reason is not None:
            result.broken = Broken(row_id=row["id"], account_id=key, reason=reason)
            return result
        result.heads[key] = stored
        result.rows += 1
        if progress is not None and result.rows % 10_000 == 0:
            progress(result.rows)
    return result


def export_record(row: Row) -> dict[str, Any]:
    """One exported row: the fields, the data as JSON, the chain hashes in hex."""
    return {
        "id": row["id"],
        "accountId": None if row["account_id"] is None else str(row["account_id"]),
        "actorUserId": None if row["actor_user_id"] is None else str(row["actor_user_id"]),
        "action": row["action"],
        "target": row["target"],
        "data": row["data_text"],
        "createdAt": stamp(row["created_at"]),
        "prevHash": bytes(row["prev_hash"]).hex(),
        "rowHash": bytes(row["row_hash"]).hex(),
    }
