"""audit_log writes (rows have no foreign key: they survive the hard delete)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tenantd.accounts import queries
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
    await queries.insert_audit(
        conn,
        account_id=account_id,
        actor_user_id=actor_user_id,
        action=action,
        target=target,
        data=data or {},
    )


async def record_many(conn: Conn, entries: Sequence[AuditEntry]) -> None:
    """Write many audit rows in one statement (sweeps)."""
    if not entries:
        return
    await queries.insert_audit_many(
        conn,
        account_ids=[e.account_id for e in entries],
        actor_user_ids=[e.actor_user_id for e in entries],
        actions=[e.action for e in entries],
        targets=[e.target for e in entries],
        data=[e.data or {} for e in entries],
    )
