"""Reading an account's audit log (owner and admin): newest first, filtered, keyset pages."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenantd.accounts.service import check_permitted
from tenantd.audit import cursors
from tenantd.audit import queries as audit_queries
from tenantd.db import Conn, Row
from tenantd.identity import permissions

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.principal import Principal


@dataclass(frozen=True)
class AuditPage:
    rows: list[Row]
    next_cursor: str | None


async def read_audit_log(
    services: Services,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    cursor: str | None,
    action: str | None,
    by: str | None,
    limit: int,
) -> AuditPage:
    """One page of the active account's audit log; members are refused (403)."""
    before_id = cursors.decode(cursor)
    statement = audit_queries.audit_page(
        account_id=account_id,
        before_id=before_id,
        action=action,
        actor=uuid.UUID(by) if by and by != "system" else None,
        system_actor=by == "system",
        limit=limit,
    )

    async def page(conn: Conn) -> list[Row]:
        await check_permitted(conn, actor, account_id, permissions.AUDIT_READ)
        return await audit_queries.fetch(conn, statement)

    # A replica answers when it has replayed the caller's own writes (DATABASE_REPLICA_URLS).
    rows = await services.db.read(page, caller=actor.user_id)
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage(rows, cursors.encode(rows[-1]["id"]) if more and rows else None)
