"""audit_log writes. Rows have no foreign key (they survive the hard delete) and are chained
per account by the database (sql/0106): whoever inserts, the row is hashed after the
previous row of its account, under that account's lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tenantd.audit import queries
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
    """Append one row to the account's audit chain (in the caller's transaction)."""
    await queries.insert_audit(
        conn,
        account_id=account_id,
        actor_user_id=actor_user_id,
        action=action,
        target=target,
        data=data or {},
    )


async def record_user(
    conn: Conn,
    user_id: uuid.UUID,
    action: str,
    *,
    by: uuid.UUID | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """A row about a user rather than an account (their address, their factors, an operator's
    action on them): no account, the user as its target, `by` the user when they acted
    themselves (None: an operator or the system)."""
    await record(
        conn, account_id=None, actor_user_id=by, action=action, target=str(user_id), data=data
    )


def _lock_order(entry: AuditEntry) -> str:
    return "" if entry.account_id is None else str(entry.account_id)


async def record_many(conn: Conn, entries: Sequence[AuditEntry]) -> None:
    """Write many audit rows in one statement (sweeps). Rows go in account order, so two
    writers of overlapping accounts take the chain locks in the same order (no deadlock)."""
    if not entries:
        return
    ordered = sorted(entries, key=_lock_order)  # stable: one account's rows keep their order
    await queries.insert_audit_many(
        conn,
        account_ids=[e.account_id for e in ordered],
        actor_user_ids=[e.actor_user_id for e in ordered],
        actions=[e.action for e in ordered],
        targets=[e.target for e in ordered],
        data=[e.data or {} for e in ordered],
    )
