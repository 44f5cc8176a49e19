"""Delete my user (GDPR) and export my data.

`DELETE /api/v1/users/me`: refused (409 TRANSFER_OWNERSHIP_FIRST) while the user owns a live
account with other active members. Otherwise, in one transaction: the accounts the user owns
alone are soft-deleted (the accounts grace window applies), every membership is revoked, the
address is released at once (a tombstone takes its place; the real one is kept aside for the
grace window), password, identities, links and push subscriptions are deleted and every session
ends. The `users` sweep anonymises the row after GRACE_DAYS: names and the kept address
cleared, notifications, preferences and sessions deleted. The row itself stays (audit rows and
revoked memberships point at its id).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenantd import audit
from tenantd.accounts import events as account_events
from tenantd.accounts import queries as account_queries
from tenantd.accounts.service import soft_delete_locked
from tenantd.audit import AuditEntry
from tenantd.auth import queries
from tenantd.auth.errors import TransferOwnershipFirst
from tenantd.bundle import Services
from tenantd.db import Conn, Database
from tenantd.errors import NotFound
from tenantd.identity import queries as identity_queries
from tenantd.identity.sessions import revoke_all
from tenantd.mfa import sensitive
from tenantd.ops.sweeps import SweepContext, batched_run, sweep
from tenantd.outbox import Actor, emit

if TYPE_CHECKING:
    from tenantd.principal import Principal

log = logging.getLogger(__name__)

GRACE_DAYS = 30


@dataclass(frozen=True)
class UserDeleted:
    deleted_at: dt.datetime
    anonymize_after: dt.datetime
    accounts_deleted: list[uuid.UUID]


async def delete_user(
    services: Services, actor: Principal | sensitive.Operator, *, user_id: uuid.UUID | None = None
) -> UserDeleted:
    """The rule of `DELETE /api/v1/users/me` (see the module docstring). A sensitive action:
    step-up (the operator, naming `user_id`, is exempt); the user is told at the address
    being released, with a link that restores the user."""
    await sensitive.require(services, actor, sensitive.USER_DELETED)
    if not isinstance(actor, sensitive.Operator):
        user_id = actor.user_id
    assert user_id is not None
    async with services.db.transaction() as conn:
        user = await identity_queries.lock_user(conn, user_id)
        if user is None or user.get("deleted_at") is not None:
            raise NotFound("User not found")
        owned = await queries.lock_owned_accounts(conn, user_id)
        shared = [str(row["id"]) for row in owned if row["others"] > 0]
        if shared:
            raise TransferOwnershipFirst(details={"accountIds": shared})
        entries: list[AuditEntry] = []
        event_actor = Actor.user(user_id)
        for row in owned:
            await soft_delete_locked(conn, row["id"], user_id, reason="user_deleted")
        for membership in await account_queries.revoke_memberships_of(conn, user_id):
            await account_events.membership(conn, "membership.revoked", membership, event_actor)
            entries.append(
                AuditEntry(
                    account_id=membership["account_id"],
                    actor_user_id=user_id,
                    action="membership.revoked",
                    target=str(user_id),
                    data={"role": membership["role"], "reason": "user_deleted"},
                )
            )
        tombstone = await identity_queries.tombstone_user(conn, user_id)
        await queries.drop_credentials(conn, user_id)
        entries.append(
            AuditEntry(
                account_id=None,
                actor_user_id=user_id,
                action="user.deleted",
                target=str(user_id),
            )
        )
        await audit.record_many(conn, entries)
        await revoke_all(conn, user_id=user_id)
        await sensitive.performed(
            services,
            conn,
            actor=actor,
            action=sensitive.USER_DELETED,
            user_id=user_id,
            undo={"accountIds": [str(row["id"]) for row in owned]},
        )
        deleted_at: dt.datetime = tombstone["deleted_at"]
        anonymize_after = deleted_at + dt.timedelta(days=GRACE_DAYS)
        # Only the id: the address is released and the names go with the anonymisation.
        await emit(
            conn,
            "user.deleted",
            account_id=None,
            actor=event_actor,
            data={"id": user_id, "deletedAt": deleted_at, "anonymizeAfter": anonymize_after},
            previous={"deletedAt": None},
        )
    log.info("user deleted", extra={"user_id": str(user_id)})
    return UserDeleted(
        deleted_at=deleted_at,
        anonymize_after=anonymize_after,
        accounts_deleted=[row["id"] for row in owned],
    )


async def export_user(services: Services, *, user_id: uuid.UUID) -> dict[str, Any]:
    """Everything tenantd keeps about the user, as JSON-ready rows (camelCase keys)."""
    async with services.db.connection() as conn:
        sections = await queries.export_rows(conn, user_id)
    user_rows = sections.pop("user")
    if not user_rows:
        raise NotFound("User not found")
    return {
        "exportedAt": dt.datetime.now(dt.UTC),
        "user": _camel(user_rows[0]),
        **{_camel_key(name): [_camel(row) for row in rows] for name, rows in sections.items()},
    }


def _camel_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel(row: dict[str, Any]) -> dict[str, Any]:
    return {_camel_key(key): value for key, value in row.items()}


async def anonymize_deleted_users(
    db: Database, *, batch_size: int = 100, dry_run: bool = False
) -> int:
    """Anonymise users deleted more than GRACE_DAYS ago, in small locked batches."""

    async def anonymize_batch(conn: Conn) -> int:
        batch = await queries.lock_users_to_anonymize(
            conn, older_than_days=GRACE_DAYS, limit=batch_size
        )
        ids = [row["id"] for row in batch]
        if ids:
            await identity_queries.anonymize_users(conn, ids)
            entries = [AuditEntry(None, None, "user.anonymized", target=str(i)) for i in ids]
            await audit.record_many(conn, entries)
        return len(ids)

    return await batched_run(
        db,
        batch_size=batch_size,
        dry_run=dry_run,
        count=lambda conn: queries.count_users_to_anonymize(conn, older_than_days=GRACE_DAYS),
        step=anonymize_batch,
        done="anonymised deleted users",
    )


@sweep("users", "Anonymise users deleted more than 30 days ago")
async def users_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await anonymize_deleted_users(
        ctx.db, batch_size=max(1, min(ctx.batch_size, 100)), dry_run=ctx.dry_run
    )
    ctx.report("users", count)


SWEEPS = (users_sweep,)
