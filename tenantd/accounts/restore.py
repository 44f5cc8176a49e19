"""Restore a soft-deleted account within the grace window (owner at deletion time, or an
operator). Refused once purged or past the window (410 ACCOUNT_PURGED), when the account is live
(409 ACCOUNT_NOT_DELETED) and when another live account claimed its domain meanwhile (409
DOMAIN_TAKEN): the claim is never taken back."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

import psycopg2.errors

from tenantd.accounts import events, queries
from tenantd.accounts.errors import AccountNotDeleted, AccountPurged, DomainTaken
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Forbidden, NotFound
from tenantd.mfa import sensitive

if TYPE_CHECKING:
    from tenantd.principal import Principal

log = logging.getLogger(__name__)


async def restore_locked(conn: Conn, account_id: uuid.UUID, *, actor_id: uuid.UUID | None) -> Row:
    """The rule, inside the caller's transaction; `actor_id` None is an operator."""
    account = await queries.lock_account_any(conn, account_id)
    if account is None:
        purged = await queries.was_purged(conn, account_id)
        if purged and (actor_id is None or await queries.deleted_by(conn, account_id, actor_id)):
            raise AccountPurged()
        raise NotFound("Account not found")
    if actor_id is not None:
        owner = await queries.owner_of_any(conn, account_id)
        if owner != actor_id:
            if await queries.is_member_of_any(conn, account_id, actor_id):
                raise Forbidden("Only the account's owner can restore it")
            raise NotFound("Account not found")
    if account["deleted_at"] is None:
        raise AccountNotDeleted()
    if account["past_grace"]:
        raise AccountPurged()
    domain = account["claimed_domain"]
    if domain:
        holder = await queries.claim_holder(conn, domain)
        if holder is not None:
            raise DomainTaken(details={"domain": domain})
    try:
        await queries.undelete_account(conn, account_id)
    except psycopg2.errors.UniqueViolation:
        # A signup claimed the domain between our check and our update.
        raise DomainTaken(details={"domain": domain}) from None
    await events.account_audited(
        conn,
        account_id,
        actor_id,
        "account.restored",
        {"deletedAt": account["deleted_at"].isoformat()},
    )
    await events.account(
        conn,
        "account.restored",
        account_id,
        events.actor_of(actor_id),
        previous={"deletedAt": account["deleted_at"]},
    )
    log.info("account restored", extra={"account_id": str(account_id)})
    account["deleted_at"] = None
    return account


async def restore_account(
    services: Services, account_id: uuid.UUID, *, actor: Principal | sensitive.Operator
) -> Row:
    """Restore a soft-deleted account (its owner at deletion time, or the operator). A
    sensitive action: step-up (the operator is exempt); the owner is told, with a link that
    deletes it again."""
    await sensitive.require(services, actor, sensitive.ACCOUNT_RESTORED)
    actor_id = None if isinstance(actor, sensitive.Operator) else actor.user_id
    async with services.db.transaction() as conn:
        row = await restore_locked(conn, account_id, actor_id=actor_id)
        owner = actor_id if actor_id is not None else await queries.owner_of_any(conn, account_id)
        if owner is not None:
            await sensitive.performed(
                services,
                conn,
                actor=actor,
                action=sensitive.ACCOUNT_RESTORED,
                user_id=owner,
                undo={"accountId": str(account_id)},
                data={"accountId": str(account_id)},
            )
        return row


async def restorable(services: Services, user_id: uuid.UUID) -> list[Row]:
    """The user's soft-deleted accounts that can still be restored (the /accounts page)."""
    async with services.db.connection() as conn:
        return await queries.restorable_accounts(conn, user_id)
