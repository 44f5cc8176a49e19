"""Statements of the audit trail: audit_log (hash-chained per account by the trigger of
sql/0106) and security_events. Each takes the connection it is given."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from psycopg2.extras import Json
from sqlalchemy.sql import Select

from tenantd.db import Conn, Row
from tenantd.db.tables import audit_log, security_events, users

# -- writes (the trigger chains every row, whatever the statement) ---------------------------


async def insert_audit(
    conn: Conn,
    *,
    account_id: uuid.UUID | None,
    actor_user_id: uuid.UUID | None,
    action: str,
    target: str | None,
    data: dict[str, Any],
) -> None:
    await conn.execute(
        "INSERT INTO audit_log (account_id, actor_user_id, action, target, data)"
        " VALUES (%(a)s, %(u)s, %(action)s, %(target)s, %(data)s)",
        {"a": account_id, "u": actor_user_id, "action": action, "target": target, "data": data},
    )


async def insert_audit_many(
    conn: Conn,
    *,
    account_ids: Sequence[uuid.UUID | None],
    actor_user_ids: Sequence[uuid.UUID | None],
    actions: Sequence[str],
    targets: Sequence[str | None],
    data: Sequence[dict[str, Any]],
) -> None:
    """Many audit rows in one statement (the sequences are parallel), inserted in the order
    given (WITH ORDINALITY), so the chain locks of their accounts are taken in that order."""
    await conn.execute(
        "INSERT INTO audit_log (account_id, actor_user_id, action, target, data)"
        " SELECT a, u, action, target, data FROM unnest(%(a)s::uuid[], %(u)s::uuid[],"
        " %(action)s::text[], %(target)s::text[], %(data)s::jsonb[])"
        " WITH ORDINALITY AS t (a, u, action, target, data, n) ORDER BY n",
        {
            "a": list(account_ids),
            "u": list(actor_user_ids),
            "action": list(actions),
            "target": list(targets),
            "data": [Json(d) for d in data],
        },
    )


# -- reading the log (composed with SQLAlchemy Core: the filters are optional) ---------------

_STAMP = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'


def audit_page(
    *,
    account_id: uuid.UUID,
    before_id: int | None,
    action: str | None,
    actor: uuid.UUID | None,
    system_actor: bool,
    limit: int,
) -> Select[Any]:
    """One page of an account's log, newest first, keyset-paginated on id (stable while rows
    are appended: a page never shifts). One extra row tells whether more follow."""
    stmt = (
        sa.select(
            audit_log.c.id,
            audit_log.c.action,
            audit_log.c.actor_user_id,
            users.c.email.label("actor_email"),
            audit_log.c.target,
            audit_log.c.data,
            audit_log.c.created_at,
        )
        .select_from(audit_log.outerjoin(users, users.c.id == audit_log.c.actor_user_id))
        .where(audit_log.c.account_id == account_id)
        .order_by(audit_log.c.id.desc())
        .limit(limit + 1)
    )
    if before_id is not None:
        stmt = stmt.where(audit_log.c.id < before_id)
    if action is not None:
        stmt = stmt.where(audit_log.c.action == action)
    if system_actor:
        stmt = stmt.where(audit_log.c.actor_user_id.is_(None))
    elif actor is not None:
        stmt = stmt.where(audit_log.c.actor_user_id == actor)
    return stmt


def _chain_columns() -> list[Any]:
    return [
        audit_log.c.id,
        audit_log.c.account_id,
        audit_log.c.actor_user_id,
        audit_log.c.action,
        audit_log.c.target,
        # PostgreSQL's own rendering of the jsonb is what the chain hashes.
        sa.cast(audit_log.c.data, sa.Text).label("data_text"),
        audit_log.c.created_at,
        audit_log.c.prev_hash,
        audit_log.c.row_hash,
    ]


def chain_batch(
    *,
    account_id: uuid.UUID | None,
    all_accounts: bool,
    after_id: int,
    since: dt.datetime | None = None,
    limit: int,
) -> Select[Any]:
    """The next rows in id order (one account's chain, or every chain interleaved)."""
    stmt = (
        sa.select(*_chain_columns())
        .where(audit_log.c.id > after_id)
        .order_by(audit_log.c.id)
        .limit(limit)
    )
    if not all_accounts:
        stmt = stmt.where(audit_log.c.account_id == account_id)
    if since is not None:
        stmt = stmt.where(audit_log.c.created_at >= since)
    return stmt


async def fetch(conn: Conn, stmt: Select[Any]) -> list[Row]:
    return await conn.fetch_all(stmt)


async def account_known(conn: Conn, account_id: uuid.UUID) -> bool:
    """Whether an account exists now or ever wrote audit rows (they outlive it)."""
    return bool(
        await conn.fetch_val(
            "SELECT EXISTS (SELECT 1 FROM accounts WHERE id = %(a)s)"
            " OR EXISTS (SELECT 1 FROM audit_log WHERE account_id = %(a)s)",
            {"a": account_id},
        )
    )


# -- security events --------------------------------------------------------------------------


async def insert_security_event(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    kind: str,
    session_id: uuid.UUID | None,
    ip: str | None,
    user_agent: str | None,
    data: dict[str, Any],
) -> None:
    await conn.execute(
        "INSERT INTO security_events (user_id, type, session_id, ip, user_agent, data)"
        " VALUES (%(u)s, %(t)s, %(s)s, %(ip)s, %(ua)s, %(d)s)",
        {
            "u": user_id,
            "t": kind,
            "s": session_id,
            "ip": ip,
            "ua": (user_agent or "")[:512] or None,
            "d": data,
        },
    )


def security_page(*, user_id: uuid.UUID, before_id: int | None, limit: int) -> Select[Any]:
    """One page of a user's security events, newest first, keyset-paginated on id."""
    stmt = (
        sa.select(
            security_events.c.id,
            security_events.c.type,
            security_events.c.session_id,
            security_events.c.ip,
            security_events.c.user_agent,
            security_events.c.data,
            security_events.c.created_at,
        )
        .where(security_events.c.user_id == user_id)
        .order_by(security_events.c.id.desc())
        .limit(limit + 1)
    )
    if before_id is not None:
        stmt = stmt.where(security_events.c.id < before_id)
    return stmt
