"""audit_log writes (rows have no foreign key: they survive the hard delete)."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.db import Conn


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
