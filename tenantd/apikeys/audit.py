"""The one place an API key's changes are written to the audit log (actor `api_key`).

The row is written by the audit log's one writer (`tenantd.audit.record`).
"""

from __future__ import annotations

import uuid
from typing import Any

from tenantd import audit
from tenantd.db import Conn
from tenantd.principal import ActingKey


async def record_key_action(
    conn: Conn,
    key: ActingKey,
    *,
    action: str,
    account_id: uuid.UUID | None = None,
    target: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Write one audit row for something `key` changed (in the caller's transaction)."""
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=None,  # the actor is the key, named in `data`
        action=action,
        target=target,
        data={"actor": key.actor, "apiKeyName": key.name, **(data or {})},
    )
