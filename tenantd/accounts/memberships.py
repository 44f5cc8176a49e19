"""Memberships: list, change role (any role of the account but owner), remove, leave, transfer
ownership.

Invariants (also unique indexes): one active membership per (account, user) and one active
owner per account. Every change holds the account lock and re-reads roles under it. Revoking
keeps the row (revoked_at set); every change writes an audit row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenantd import audit
from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries, roles
from tenantd.accounts.domain import Accounts
from tenantd.accounts.errors import OwnerCannotLeave
from tenantd.accounts.service import (
    Activation,
    activate_next_account,
    lock_live_account,
    lock_scoped,
    read_scoped,
    require_seat,
)
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, Forbidden, NotFound, ValidationFailed
from tenantd.identity import permissions
from tenantd.identity.sessions import end_account_sessions
from tenantd.mfa import sensitive
from tenantd.outbox import Actor

if TYPE_CHECKING:
    from tenantd.principal import Principal


async def list_members(services: Services, actor: Principal, account_id: uuid.UUID) -> list[Row]:
    """Active members of the active account (any member may read them)."""
    return await read_scoped(
        services, actor, account_id, permissions.MEMBERS_READ, queries.list_members
    )


async def _locked_target(conn: Conn, account: Row, user_id: uuid.UUID) -> Row:
    """The target's membership, locked: never the owner's, and for a custom role caller only
    one whose role it covers."""
    locked = await queries.lock_memberships(conn, account_id=account["id"], user_ids=[user_id])
    target = locked.get(user_id)
    if target is None:
        raise NotFound("No active member with this id")
    if target["role"] == "owner":
        raise Forbidden("The owner's membership changes only by transferring ownership")
    held = await roles.grants_of(conn, account["id"], target["role"])
    if not permissions.covers(account["role"], account["role_permissions"], held):
        raise Forbidden("This member's role holds permissions your role does not")
    return target


async def change_role(
    services: Services, actor: Principal, account_id: uuid.UUID, *, user_id: uuid.UUID, role: str
) -> Row:
    """Give a non-owner another role of the account, system or custom (`members:change_role`);
    never owner: that changes only by transfer."""
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.MEMBERS_CHANGE_ROLE)
        await roles.assignable(conn, account, role)
        target = await _locked_target(conn, account, user_id)
        return await _moved(conn, target, role, by=actor.user_id)


async def _moved(
    conn: Conn,
    membership: Row,
    role: str,
    *,
    by: uuid.UUID | None,
    actor: Actor | None = None,
    via: dict[str, Any] | None = None,
) -> Row:
    """`membership` moved to `role`, with its audit row and event (`via` goes into their
    data); as it is when it already has the role."""
    if membership["role"] == role:
        return membership
    return await outbox_events.change(
        conn,
        "membership.role_changed",
        await queries.set_role(conn, membership_id=membership["id"], role=role),
        by=by,
        actor=actor,
        data={"from": membership["role"], "to": role, **(via or {})},
        previous={"role": membership["role"]},
    )


async def remove_member(
    services: Services, actor: Principal, account_id: uuid.UUID, *, user_id: uuid.UUID
) -> Row:
    """Soft-revoke a non-owner's membership (`members:remove`); the row is kept."""
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.MEMBERS_REMOVE)
        target = await _locked_target(conn, account, user_id)
        return await _revoke(conn, actor, target, reason="removed")


async def _revoke(conn: Conn, actor: Principal, membership: Row, *, reason: str) -> Row:
    """Soft-revoke `membership`, with its audit row and event."""
    return await outbox_events.change(
        conn,
        "membership.revoked",
        await queries.revoke_membership(conn, membership["id"]),
        by=actor.user_id,
        data={"role": membership["role"], "reason": reason},
        previous={"revokedAt": None},
    )


@dataclass(frozen=True)
class Left:
    membership: Row
    activation: Activation


async def leave_account(
    services: Accounts,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    refresh_token: str | None,
) -> Left:
    """The caller leaves (member or admin; the owner gets OWNER_CANNOT_LEAVE).

    The caller's session moves to its next account (or to none).
    """
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, None)  # any member but the owner
        locked = await queries.lock_memberships(
            conn, account_id=account_id, user_ids=[actor.user_id]
        )
        own = locked.get(actor.user_id)
        if own is None:
            raise NotFound("You are not a member of this account")
        if own["role"] == "owner":
            raise OwnerCannotLeave()
        revoked = await _revoke(conn, actor, own, reason="left")
        activation = await activate_next_account(
            conn, services, actor=actor, refresh_token=refresh_token
        )
    return Left(membership=revoked, activation=activation)


@dataclass(frozen=True)
class Transferred:
    owner: Row
    previous_owner: Row


async def transfer_ownership(
    services: Services, actor: Principal, account_id: uuid.UUID, *, user_id: uuid.UUID
) -> Transferred:
    """Owner only: demote the owner to admin, then promote the target, in one transaction.

    The caller's ownership and the target's membership are re-read under the account lock
    (bypassing the role resolved for the token), so concurrent transfers serialise and the
    account never has zero or two owners. A sensitive action: step-up; the previous owner is
    told, with a link that gives the ownership back.
    """
    await sensitive.require(services, actor, sensitive.OWNERSHIP_TRANSFERRED)
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.OWNERSHIP_TRANSFER)
        if user_id == actor.user_id:
            raise Conflict("You already own this account")
        locked = await queries.lock_memberships(
            conn, account_id=account_id, user_ids=[actor.user_id, user_id]
        )
        current = locked.get(actor.user_id)
        if current is None or current["role"] != "owner":
            raise Forbidden("Only the owner can transfer ownership")
        target = locked.get(user_id)
        if target is None:
            raise NotFound("The new owner must be an active member of the account")
        # Order matters: the one-owner unique index forbids promoting first.
        previous = await queries.set_role(conn, membership_id=current["id"], role="admin")
        owner = await queries.set_role(conn, membership_id=target["id"], role="owner")
        await audit.record(
            conn,
            account_id=account_id,
            actor_user_id=actor.user_id,
            action="ownership.transferred",
            target=str(user_id),
            data={
                "from": str(actor.user_id),
                "to": str(user_id),
                "targetPreviousRole": target["role"],
            },
        )
        await outbox_events.ownership_transferred(
            conn,
            account_id=account_id,
            previous_owner=previous,
            owner=owner,
            actor=outbox_events.actor_of(actor.user_id),
        )
        await sensitive.performed(
            services,
            conn,
            actor=actor,
            action=sensitive.OWNERSHIP_TRANSFERRED,
            undo={"accountId": str(account_id), "to": str(user_id)},
            data={"accountId": str(account_id), "to": str(user_id)},
        )
        return Transferred(owner=owner, previous_owner=previous)


async def active_membership(conn: Conn, *, account_id: uuid.UUID, user_id: uuid.UUID) -> Row | None:
    """The user's active membership of the account, locked; None when there is none."""
    locked = await queries.lock_memberships(conn, account_id=account_id, user_ids=[user_id])
    return locked.get(user_id)


@dataclass(frozen=True)
class Joined:
    membership: Row
    created: bool  # False: the user already was an active member (the membership as it is)


async def join_within_seats(
    conn: Conn,
    *,
    account_id: uuid.UUID,
    user_id: uuid.UUID,
    role: str,
    actor: Actor,
    actor_user_id: uuid.UUID | None,
    via: dict[str, Any],
) -> Joined:
    """Make the user a member with `role` if a seat is free, the one way a membership is made
    without an inviting member (SSO just-in-time, a SCIM directory). The seat cap is read
    under the account lock, as invitations and join requests do, so racing joins never exceed
    it; SeatLimitReached when no seat is free, NotFound for a deleted account. A role that is
    no longer one of the account (a custom role deleted since it was mapped) gives `member`.
    The caller owns the transaction; `actor_user_id` is the audit entry's actor (the user
    joining through SSO; None for a directory), `via` goes into its data."""
    if role == "owner":
        raise ValidationFailed({"role": "owner_by_transfer: not given on joining"})
    await lock_live_account(conn, account_id)
    current = await active_membership(conn, account_id=account_id, user_id=user_id)
    if current is not None:
        return Joined(current, created=False)
    if not await roles.is_role_of(conn, account_id, role):
        role = "member"
    await require_seat(conn, account_id, user_id)
    membership = await queries.insert_membership(
        conn, account_id=account_id, user_id=user_id, role=role
    )
    await outbox_events.change(
        conn,
        "membership.created",
        membership,
        by=actor_user_id,
        actor=actor,
        data={"role": role, **via},
    )
    return Joined(membership, created=True)


async def set_member_role(
    conn: Conn, *, membership: Row, role: str, actor: Actor, via: dict[str, Any]
) -> Row:
    """Move a non-owner member to `role` (the owner's membership changes only by transfer); a
    role that is no longer one of the account (a custom role deleted since a directory group
    was mapped to it) gives `member`."""
    if membership["role"] == "owner" or role == "owner":
        return membership
    if not await roles.is_role_of(conn, membership["account_id"], role):
        role = "member"
    return await _moved(conn, membership, role, by=None, actor=actor, via=via)


async def end_membership(
    conn: Conn, *, membership: Row, actor: Actor, reason: str, via: dict[str, Any]
) -> Row:
    """Soft-revoke a non-owner's membership and end the user's sessions in the account at
    once (OwnerCannotLeave for the owner: transfer ownership first)."""
    if membership["role"] == "owner":
        raise OwnerCannotLeave()
    revoked = await queries.revoke_membership(conn, membership["id"])
    account_id, user_id = membership["account_id"], membership["user_id"]
    ended = await end_account_sessions(conn, user_id=user_id, account_id=account_id)
    return await outbox_events.change(
        conn,
        "membership.revoked",
        revoked,
        by=None,
        actor=actor,
        data={"role": membership["role"], "reason": reason, "sessionsEnded": len(ended), **via},
        previous={"revokedAt": None},
    )
