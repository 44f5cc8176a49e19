"""Account provisioning at verification (or OAuth callback): account + owner membership, atomically.

Idempotent: the user row is locked first, so concurrent verifications of one user serialise
and the second finds the membership the first created.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries
from tenantd.accounts.domains import claimable_domain
from tenantd.accounts.errors import DomainClaimed
from tenantd.accounts.names import account_name
from tenantd.accounts.settings import AccountSettings
from tenantd.db import Conn
from tenantd.errors import Conflict
from tenantd.identity import queries as auth_queries
from tenantd.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DomainConflict:
    """A later verified signup on a claimed domain: a join request was written instead."""

    account_id: uuid.UUID  # the live account holding the claim
    domain: str
    join_request_id: uuid.UUID


@dataclass(frozen=True)
class Provisioned:
    """Outcome of provisioning. Exactly one of account_id / conflict is set.

    On a conflict the caller must COMMIT first (the join request must survive), then answer
    409 DOMAIN_CLAIMED with details {accountId, domain}, then tell the owner (after commit).
    """

    account_id: uuid.UUID | None
    created: bool
    conflict: DomainConflict | None = None


async def create_account(
    conn: Conn,
    settings: Settings,
    *,
    owner_id: uuid.UUID,
    name: str,
    claimed_domain: str | None = None,
) -> uuid.UUID:
    """Insert an account with its owner membership and default plan (caller's transaction).

    Every new account passes here, so a user waiting on a join request cannot sidestep it.
    """
    if settings.section(AccountSettings).account_domain_claiming:
        await refuse_while_join_pending(conn, user_id=owner_id)
    account_id = await queries.insert_account(conn, name=name, claimed_domain=claimed_domain)
    if account_id is None:
        raise Conflict("This email domain is already claimed by another account")
    await _populate(conn, settings, account_id=account_id, owner_id=owner_id, name=name)
    return account_id


async def refuse_while_join_pending(conn: Conn, *, user_id: uuid.UUID) -> None:
    """DOMAIN_CLAIMED while the user's join request to the live account claiming their domain
    is pending: no separate account. Once it is approved or denied (or the claim is released
    with its account) the user may create accounts like anyone else."""
    pending = await queries.pending_claim_request(conn, user_id)
    if pending is not None:
        raise DomainClaimed(
            details={"accountId": str(pending["account_id"]), "domain": pending["domain"]}
        )


async def _populate(
    conn: Conn, settings: Settings, *, account_id: uuid.UUID, owner_id: uuid.UUID, name: str
) -> None:
    """Owner membership, default plan and audit rows of a freshly inserted account."""
    membership = await queries.insert_membership(
        conn, account_id=account_id, user_id=owner_id, role="owner"
    )
    await queries.insert_account_plan(
        conn, account_id=account_id, plan_code=settings.section(AccountSettings).default_plan
    )
    await outbox_events.account_audited(
        conn, account_id, owner_id, "account.created", {"name": name}
    )
    await outbox_events.audited_change(
        conn, "membership.created", membership, by=owner_id, data={"role": "owner"}
    )
    actor = outbox_events.actor_of(owner_id)
    await outbox_events.account(conn, "account.created", account_id, actor)
    await outbox_events.membership(conn, "membership.created", membership, actor)


async def provision_personal_account(
    conn: Conn, settings: Settings, *, user_id: uuid.UUID
) -> Provisioned:
    """Give a verified user with no live membership a personal account (caller's transaction).

    Domain claiming follows the decision order of SERVICE.md: read the flag, extract the
    domain, stop if it is public, look up an active claim, then reuse, claim or report a
    conflict (a pending join request is written; the caller commits before answering 409).
    """
    async with conn.transaction():
        user = await auth_queries.lock_user(conn, user_id)
        if user is None:
            raise LookupError(f"user {user_id} does not exist")
        existing = await queries.default_account_id(conn, user_id)
        if existing is not None:
            return Provisioned(account_id=existing, created=False)
        name = account_name(user["first_name"], user["last_name"], user["email"])
        domain = (
            claimable_domain(user["email"])
            if settings.section(AccountSettings).account_domain_claiming
            else None
        )
        if domain is None:
            account_id = await create_account(conn, settings, owner_id=user_id, name=name)
            return Provisioned(account_id=account_id, created=True)
        for _attempt in range(3):
            holder = await queries.claim_holder(conn, domain)
            if holder is not None:
                return await _domain_conflict(conn, user_id=user_id, holder=holder, domain=domain)
            # ON CONFLICT waits for a concurrent first signup; if it won, we see its claim next.
            claimed = await queries.insert_account(conn, name=name, claimed_domain=domain)
            if claimed is not None:
                await _populate(conn, settings, account_id=claimed, owner_id=user_id, name=name)
                return Provisioned(account_id=claimed, created=True)
        raise RuntimeError(f"domain claim for {domain} kept changing; giving up")


async def _domain_conflict(
    conn: Conn, *, user_id: uuid.UUID, holder: uuid.UUID, domain: str
) -> Provisioned:
    request_id, created = await queries.upsert_pending_join_request(
        conn, account_id=holder, user_id=user_id, domain=domain
    )
    if created:
        await outbox_events.join_request(conn, "join_request.created", request_id, by=user_id)
    log.info("verified signup on a claimed domain; join request pending")
    return Provisioned(
        account_id=None,
        created=False,
        conflict=DomainConflict(account_id=holder, domain=domain, join_request_id=request_id),
    )
