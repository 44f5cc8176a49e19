"""Invitations: create, list pending, resend (token rotated), revoke (soft), accept.

The raw token is returned once (and mailed by an `accounts.email` job submitted in the same
transaction); only HMAC-SHA256(SECRET_KEY, token) is stored.
Accepting locks the account, then the invitation, counts seats under the lock and creates the
membership in the same transaction, so racing accepts never exceed the seat cap. An
outstanding invitation reserves no seat. The accepting user's email must match the invited
address (both normalised): a forwarded link does not let someone else in.
"""

from __future__ import annotations

import hmac
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenantd import audit
from tenantd.accounts import events as outbox_events
from tenantd.accounts import mail, queries, roles
from tenantd.accounts.domain import Accounts
from tenantd.accounts.errors import (
    FeatureNotEnabled,
    InvitationAlreadyUsed,
    InvitationExpired,
    InvitationRevoked,
)
from tenantd.accounts.plans import entitlements
from tenantd.accounts.service import (
    Activation,
    activate,
    lock_scoped,
    read_scoped,
    refuse_without_mfa,
    require_seat,
)
from tenantd.accounts.settings import AccountSettings
from tenantd.addresses import InvalidEmail, canonical_email, normalize_email
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, Forbidden, NotFound, ValidationFailed
from tenantd.identity import permissions
from tenantd.identity.tokens import token_hash
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.ratelimit import limit_chosen_recipient

if TYPE_CHECKING:
    from tenantd.principal import Principal

FEATURE = "team_invitations"
MAIL_SCOPE = "invitation"  # create and resend share one limit per inviter and per invitee


@dataclass(frozen=True)
class Issued:
    invitation: Row
    token: str  # raw, shown once


async def _require_feature(conn: Conn, account_id: uuid.UUID) -> None:
    if not (await entitlements(conn, account_id)).features.get(FEATURE, False):
        raise FeatureNotEnabled(details={"feature": FEATURE})


async def _mail_token(
    services: Services, conn: Conn, actor: Principal, email: str
) -> tuple[str, str]:
    """A new token to mail to `email`: its seed (the mail job makes the link of it) and the
    raw token. Invitation mail goes to an address the caller chooses: limited per inviter and
    per invitee here, in the action, whatever route or page calls it (MAIL_RATE_LIMITS)."""
    settings = services.settings
    await limit_chosen_recipient(
        conn,
        settings.section(RateLimitSettings),
        secret_key=settings.secret_key,
        scope=MAIL_SCOPE,
        user_id=actor.user_id,
        recipient=email,
    )
    seed = mail.new_invitation_seed()
    return seed, mail.invitation_token(settings.secret_key, seed)


async def _audited(
    conn: Conn, action: str, invitation: Row, actor_id: uuid.UUID | None, **data: Any
) -> None:
    """The audit row of a change to `invitation`: its address, then `data`, as the data."""
    await audit.record(
        conn,
        account_id=invitation["account_id"],
        actor_user_id=actor_id,
        action=action,
        target=str(invitation["id"]),
        data={"email": invitation["email"], **data},
    )


async def create_invitation(
    services: Services, actor: Principal, account_id: uuid.UUID, *, email: str, role: str
) -> Issued:
    """Invite an address with a role of the account (`members:invite`, feature
    team_invitations); the invitee is emailed."""
    try:
        email = canonical_email(email)
    except InvalidEmail as error:
        raise ValidationFailed({"email": error.reason}) from None
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.MEMBERS_INVITE)
        await roles.assignable(conn, account, role)
        await _require_feature(conn, account_id)
        if await queries.active_member_by_email(conn, account_id=account_id, email=email):
            raise Conflict("This address already belongs to an active member")
        pending = await queries.pending_invitation_for(conn, account_id=account_id, email=email)
        if pending is not None:
            raise Conflict(
                "A pending invitation for this address exists; resend it instead",
                details={"invitationId": str(pending["id"])},
            )
        seed, token = await _mail_token(services, conn, actor, email)
        invitation = await queries.insert_invitation(
            conn,
            account_id=account_id,
            email=email,
            role=role,
            token_hash=token_hash(services.settings.secret_key, token),
            invited_by=actor.user_id,
            ttl_hours=services.settings.section(AccountSettings).invitation_ttl_hours,
        )
        await _audited(conn, "invitation.created", invitation, actor.user_id, role=role)
        await outbox_events.invitation(
            conn, "invitation.created", invitation, outbox_events.actor_of(actor.user_id)
        )
        await mail.submit_invitation(
            services, conn, invitation_id=invitation["id"], seed=seed, inviter_id=actor.user_id
        )
    return Issued(invitation=invitation, token=token)


async def list_invitations(
    services: Services, actor: Principal, account_id: uuid.UUID
) -> list[Row]:
    """Pending invitations of the active account (owner or admin)."""
    return await read_scoped(
        services, actor, account_id, permissions.MEMBERS_INVITE, queries.list_pending_invitations
    )


async def _locked_pending(
    conn: Conn, account_id: uuid.UUID | None, invitation_id: uuid.UUID
) -> Row:
    """The invitation, locked (of any account with None); 404 if none, 409 once accepted."""
    invitation = await queries.lock_invitation(
        conn, invitation_id=invitation_id, account_id=account_id
    )
    if invitation is None:
        raise NotFound("Invitation not found")
    if invitation["accepted_at"] is not None:
        raise Conflict("This invitation was already accepted")
    return invitation


async def resend_invitation(
    services: Services, actor: Principal, account_id: uuid.UUID, *, invitation_id: uuid.UUID
) -> Issued:
    """Rotate the token (older links stop working), extend the expiry, email again."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.MEMBERS_INVITE)
        await _require_feature(conn, account_id)
        current = await _locked_pending(conn, account_id, invitation_id)
        if current["revoked_at"] is not None:
            raise Conflict("This invitation was revoked; create a new one")
        seed, token = await _mail_token(services, conn, actor, current["email"])
        invitation = await queries.rotate_invitation(
            conn,
            invitation_id=invitation_id,
            token_hash=token_hash(services.settings.secret_key, token),
            ttl_hours=services.settings.section(AccountSettings).invitation_ttl_hours,
        )
        await _audited(conn, "invitation.resent", invitation, actor.user_id)
        await mail.submit_invitation(
            services, conn, invitation_id=invitation_id, seed=seed, inviter_id=actor.user_id
        )
    return Issued(invitation=invitation, token=token)


async def revoke_invitation(
    services: Services, actor: Principal, account_id: uuid.UUID, *, invitation_id: uuid.UUID
) -> Row:
    """Soft revoke (owner or admin); revoking twice is a no-op, an accepted one is a conflict."""
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.MEMBERS_INVITE)
        return await revoke_locked(
            conn, account_id=account_id, invitation_id=invitation_id, actor_id=actor.user_id
        )


async def revoke_locked(
    conn: Conn,
    *,
    account_id: uuid.UUID | None,
    invitation_id: uuid.UUID,
    actor_id: uuid.UUID | None,
) -> Row:
    """Revoke one invitation (caller's transaction; the operator CLI passes no account)."""
    current = await _locked_pending(conn, account_id, invitation_id)
    if current["revoked_at"] is not None:
        return current
    revoked = await queries.revoke_invitation(conn, invitation_id)
    await _audited(conn, "invitation.revoked", revoked, actor_id, reason="revoked")
    await outbox_events.invitation(
        conn, "invitation.revoked", revoked, outbox_events.actor_of(actor_id)
    )
    return revoked


@dataclass(frozen=True)
class Accepted:
    account: Row
    membership: Row
    # Set when the caller had no active account, and always by `join_by_invitation`.
    activation: Activation | None


def _refuse_unless_pending(invitation: Row) -> None:
    if invitation["accepted_at"] is not None:
        raise InvitationAlreadyUsed()
    if invitation["revoked_at"] is not None:
        # The expiry sweep revokes at (or after) expires_at: report that as expired.
        if invitation["revoked_at"] >= invitation["expires_at"]:
            raise InvitationExpired()
        raise InvitationRevoked()
    if invitation["expired"]:
        raise InvitationExpired()


async def accept_invitation(
    services: Accounts, actor: Principal, *, token: str, refresh_token: str | None
) -> Accepted:
    """Redeem a raw token: seat cap checked under the account lock, membership created. A
    caller without an active account works in the one joined (`activation`); one with an
    active account keeps it."""
    return await _accept(services, actor, token, refresh_token, make_active=False)


async def join_by_invitation(
    services: Accounts, actor: Principal, *, token: str, refresh_token: str | None
) -> Accepted:
    """The hosted page's accept: as `accept_invitation`, and the account joined becomes the
    session's active one in the same transaction, whatever the caller worked in before."""
    return await _accept(services, actor, token, refresh_token, make_active=True)


async def _accept(
    services: Accounts,
    actor: Principal,
    token: str,
    refresh_token: str | None,
    *,
    make_active: bool,
) -> Accepted:
    digest = token_hash(services.settings.secret_key, token)
    async with services.db.transaction() as conn:
        found = await queries.invitation_by_hash(conn, digest)
        if found is None:
            raise NotFound("Invitation not found")
        account = await queries.lock_account(conn, found["account_id"])  # lock order: account first
        invitation = await queries.lock_invitation(conn, invitation_id=found["id"])
        # Re-read under the lock: a resend may have rotated the token meanwhile.
        if invitation is None or not hmac.compare_digest(bytes(invitation["token_hash"]), digest):
            raise NotFound("Invitation not found")
        _refuse_unless_pending(invitation)
        if account is None:
            raise NotFound("The account of this invitation no longer exists")
        email = await queries.user_email(conn, actor.user_id)
        if email is None or normalize_email(email) != normalize_email(invitation["email"]):
            raise Forbidden("This invitation was sent to another email address")
        # Enrol first: the invitation stays pending until then.
        await refuse_without_mfa(conn, account, actor)
        await require_seat(
            conn,
            account["id"],
            actor.user_id,
            already_member="You are already a member of this account",
        )
        membership = await queries.insert_membership(
            conn, account_id=account["id"], user_id=actor.user_id, role=invitation["role"]
        )
        await queries.mark_invitation_accepted(
            conn, invitation_id=invitation["id"], user_id=actor.user_id
        )
        await _audited(
            conn, "invitation.accepted", invitation, actor.user_id, role=invitation["role"]
        )
        await outbox_events.audited_change(
            conn,
            "membership.created",
            membership,
            by=actor.user_id,
            data={"role": invitation["role"], "via": "invitation"},
        )
        who = outbox_events.actor_of(actor.user_id)
        accepted = await queries.lock_invitation(conn, invitation_id=invitation["id"])
        assert accepted is not None
        await outbox_events.invitation(conn, "invitation.accepted", accepted, who)
        await outbox_events.membership(conn, "membership.created", membership, who)
        activation = None
        if actor.account_id is None or make_active:
            activation = await activate(
                conn,
                services.settings,
                services.identity.keyring,
                actor,
                account["id"],
                refresh_token,
            )
    return Accepted(account=account, membership=membership, activation=activation)
