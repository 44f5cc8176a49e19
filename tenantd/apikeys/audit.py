"""The one place an API key's changes are written to the audit log (actor `api_key`).

The audit writer is moving to tenantd/audit; when it lands, only this function changes.
"""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.apikeys import queries
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
    await queries.insert_audit(
        conn,
        account_id=account_id,
        action=action,
        target=target,
        data={"actor": key.actor, "apiKeyName": key.name, **(data or {})},
    )
