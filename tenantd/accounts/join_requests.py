"""Join requests (domain claiming): list pending, approve (seat cap under lock), deny.

Requests are created by provisioning when a verified signup lands on a claimed domain.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries
from tenantd.accounts.service import lock_scoped, read_scoped, require_seat
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, NotFound
from tenantd.identity import permissions

if TYPE_CHECKING:
    from tenantd.principal import Principal


async def list_join_requests(
    services: Services, actor: Principal, account_id: uuid.UUID
) -> list[Row]:
    """Pending join requests of the active account (owner or admin)."""
    return await read_scoped(
        services,
        actor,
        account_id,
        permissions.JOIN_REQUESTS_DECIDE,
        queries.list_pending_join_requests,
    )


async def _locked_pending(conn: Conn, account_id: uuid.UUID, request_id: uuid.UUID) -> Row:
    request = await queries.lock_join_request(conn, request_id=request_id, account_id=account_id)
    if request is None:
        raise NotFound("Join request not found")
    if request["status"] != "pending":
        raise Conflict(f"This join request was already {request['status']}")
    return request


@dataclass(frozen=True)
class Decision:
    join_request: Row
    membership: Row | None


@asynccontextmanager
async def _deciding(
    services: Services, actor: Principal, account_id: uuid.UUID, request_id: uuid.UUID
) -> AsyncIterator[tuple[Conn, Row]]:
    """A decision's transaction: the account locked for a decider, the pending request too."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.JOIN_REQUESTS_DECIDE)
        yield conn, await _locked_pending(conn, account_id, request_id)


async def approve_join_request(
    services: Services, actor: Principal, account_id: uuid.UUID, *, request_id: uuid.UUID
) -> Decision:
    """Approve (owner or admin): the requester becomes a member if a seat is free."""
    async with _deciding(services, actor, account_id, request_id) as (conn, request):
        await require_seat(
            conn,
            account_id,
            request["user_id"],
            already_member="The requester is already a member; deny the request instead",
        )
        membership = await queries.insert_membership(
            conn, account_id=account_id, user_id=request["user_id"], role="member"
        )
        decided = await _decide(conn, actor, request, "approved")
        await outbox_events.change(
            conn,
            "membership.created",
            membership,
            by=actor.user_id,
            data={"role": "member", "via": "join_request"},
        )
    return Decision(join_request=decided, membership=membership)


async def deny_join_request(
    services: Services, actor: Principal, account_id: uuid.UUID, *, request_id: uuid.UUID
) -> Decision:
    """Deny (owner or admin)."""
    async with _deciding(services, actor, account_id, request_id) as (conn, request):
        decided = await _decide(conn, actor, request, "denied")
    return Decision(join_request=decided, membership=None)


async def _decide(conn: Conn, actor: Principal, request: Row, status: str) -> Row:
    """Settle a locked pending request as `status` (approved, denied), audited, with its event."""
    decided = await queries.decide_join_request(
        conn, request_id=request["id"], status=status, decided_by=actor.user_id
    )
    await outbox_events.join_request(
        conn, f"join_request.{status}", request["id"], by=actor.user_id
    )
    return decided
