"""Operator actions behind `tenantd accounts ...` and `tenantd invitations ...`.

Operators act without a session; their audit rows carry no actor.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tenantd.accounts import events, invitations, queries
from tenantd.accounts.plans import KNOWN_FEATURES, features_of
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import NotFound, ValidationFailed


async def list_accounts(services: Services, *, include_deleted: bool = False) -> list[Row]:
    """Every account with its plan, seat cap and seats used."""
    async with services.db.connection() as conn:
        return await queries.all_accounts(conn, include_deleted=include_deleted)


async def show_account(services: Services, account_id: uuid.UUID) -> dict[str, Any]:
    """One account (live or soft-deleted) with members, plan, seats and features."""
    async with services.db.connection() as conn:
        row = await queries.account_detail(conn, account_id)
        if row is None:
            raise NotFound(f"account {account_id} not found")
        members = await queries.list_members(conn, account_id)
    return {
        "id": row["id"],
        "name": row["name"],
        "claimedDomain": row["claimed_domain"],
        "createdAt": row["created_at"],
        "deletedAt": row["deleted_at"],
        "plan": row["plan"],
        "seats": row["seats"],
        "seatsOverride": row["seats_override"],
        "seatsUsed": row["seats_used"],
        "pendingInvitations": row["pending_invitations"],
        "owner": row["owner_email"],
        "features": features_of(row),
        "members": [
            {"userId": m["user_id"], "email": m["email"], "role": m["role"]} for m in members
        ],
    }


@asynccontextmanager
async def _changing(services: Services, account_id: uuid.UUID) -> AsyncIterator[Conn]:
    """The transaction of an operator's change to a live account, the account locked."""
    async with services.db.transaction() as conn:
        if await queries.lock_account(conn, account_id) is None:
            raise NotFound(f"account {account_id} not found")
        yield conn


async def set_plan(
    services: Services, account_id: uuid.UUID, *, plan: str, seats: int | None = None
) -> None:
    """Put a live account on a plan; `seats` overrides the plan's seat count (None: the plan's).

    A downgrade below the current member count removes no one; it blocks later accepts
    and join approvals until seats free up.
    """
    if seats is not None and seats < 0:
        raise ValidationFailed({"seats": "must be >= 0"})
    async with _changing(services, account_id) as conn:
        if not await queries.plan_exists(conn, plan):
            raise ValidationFailed({"plan": f"unknown plan {plan!r}"})
        await queries.set_plan(conn, account_id=account_id, plan_code=plan, seats=seats)
        await events.account_audited(
            conn, account_id, None, "account.plan_changed", {"plan": plan, "seats": seats}
        )


async def set_feature(
    services: Services, account_id: uuid.UUID, *, feature: str, enabled: bool
) -> None:
    """Override one feature of a live account, whatever its plan says."""
    async with _changing(services, account_id) as conn:
        known = set(KNOWN_FEATURES) | await queries.known_features(conn)
        if feature not in known:
            raise ValidationFailed(
                {"feature": f"unknown feature {feature!r}; known: {', '.join(sorted(known))}"}
            )
        await queries.set_feature(conn, account_id=account_id, feature=feature, enabled=enabled)
        data = {"feature": feature, "enabled": enabled}
        await events.account_audited(conn, account_id, None, "account.feature_changed", data)


async def list_invitations(services: Services, account_id: uuid.UUID) -> list[Row]:
    """Pending invitations of an account."""
    async with services.db.connection() as conn:
        if await queries.account_liveness(conn, account_id) is None:
            raise NotFound(f"account {account_id} not found")
        return await queries.list_pending_invitations(conn, account_id)


async def revoke_invitation(services: Services, invitation_id: uuid.UUID) -> Row:
    """Soft-revoke one invitation by id."""
    async with services.db.transaction() as conn:
        return await invitations.revoke_locked(
            conn, account_id=None, invitation_id=invitation_id, actor_id=None
        )
