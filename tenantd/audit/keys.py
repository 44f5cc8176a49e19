"""The one place an API key's changes are written to the audit log (actor `api_key`).

The row is written by the audit log's one writer (`tenantd.audit.record`); the key is any
caller that names itself (`tenantd.apikeys.principal.ActingKey` is the one).
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from tenantd.audit.log import record
from tenantd.db import Conn


class KeyCaller(Protocol):
    """A server caller authorized by an API key."""

    @property
    def name(self) -> str: ...

    @property
    def actor(self) -> dict[str, str]: ...


async def record_key_action(
    conn: Conn,
    key: KeyCaller,
    *,
    action: str,
    account_id: uuid.UUID | None = None,
    target: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Write one audit row for something `key` changed (in the caller's transaction)."""
    await record(
        conn,
        account_id=account_id,
        actor_user_id=None,  # the actor is the key, named in `data`
        action=action,
        target=target,
        data={"actor": key.actor, "apiKeyName": key.name, **(data or {})},
    )
