"""audit_log writes (rows have no foreign key: they survive the hard delete)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2.extras import Json

from tenantd.db import Conn


@dataclass(frozen=True)
class AuditEntry:
    account_id: uuid.UUID | None
    actor_user_id: uuid.UUID | None
    action: str
    target: str | None = None
    data: dict[str, Any] | None = None


async def record(
    conn: Conn,
    *,
    account_id: uuid.UUID | None,
    actor_user_id: uuid.UUID | None,
    action: str,
    target: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO audit_log (account_id, actor_user_id, action, target, data)"
        " VALUES (%(a)s, %(u)s, %(action)s, %(target)s, %(data)s)",
        {
            "a": account_id,
            "u": actor_user_id,
            "action": action,
            "target": target,
            "data": data or {},
        },
    )


async def record_many(conn: Conn, entries: Sequence[AuditEntry]) -> None:
    """Write many audit rows in one statement (sweeps)."""
    if not entries:
        return
    await conn.execute(
        "INSERT INTO audit_log (account_id, actor_user_id, action, target, data)"
        " SELECT * FROM unnest(%(a)s::uuid[], %(u)s::uuid[], %(action)s::text[],"
        " %(target)s::text[], %(data)s::jsonb[])",
        {
            "a": [e.account_id for e in entries],
            "u": [e.actor_user_id for e in entries],
            "action": [e.action for e in entries],
            "target": [e.target for e in entries],
            "data": [Json(e.data or {}) for e in entries],
        },
    )
