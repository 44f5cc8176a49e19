"""Tenancy sweeps: the hard delete of accounts past the grace window, invitation expiry.

Both are idempotent and safe to run twice at once: each batch is claimed with
FOR UPDATE SKIP LOCKED in its own short transaction, so parallel runs split the work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from tenantd import audit
from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries
from tenantd.accounts.service import GRACE_DAYS
from tenantd.db import Conn, Database, Row
from tenantd.ops.sweeps import SweepContext, batched_run, sweep


async def _audited(
    conn: Conn,
    batch: list[Row],
    action: str,
    entry: Callable[[Row], tuple[uuid.UUID, dict[str, Any]]],
) -> None:
    """One audit row per swept row, in one statement: no actor, the row's id as the target,
    `entry(row)` its account and data."""
    entries = []
    for row in batch:
        account_id, data = entry(row)
        target = str(row["id"])
        entries.append(audit.AuditEntry(account_id, None, action, target=target, data=data))
    await audit.record_many(conn, entries)


async def purge_deleted_accounts(
    db: Database,
    *,
    older_than_days: int = GRACE_DAYS,
    batch_size: int = 100,
    dry_run: bool = False,
) -> int:
    """Hard-delete accounts soft-deleted more than `older_than_days` ago; return how many.

    Foreign keys cascade to every account-scoped row (memberships, invitations, join
    requests, plan, feature overrides, notifications, sessions pointing at it). audit_log
    has no foreign key: its rows survive, plus one `account.hard_deleted` row per account.
    With dry_run nothing changes and the count of candidates is returned.
    """

    async def purge_batch(conn: Conn) -> int:
        batch = await queries.lock_purgeable_accounts(
            conn, older_than_days=older_than_days, limit=batch_size
        )
        if not batch:
            return 0
        await _audited(
            conn,
            batch,
            "account.hard_deleted",
            lambda row: (
                row["id"],
                {
                    "name": row["name"],
                    "claimedDomain": row["claimed_domain"],
                    "deletedAt": row["deleted_at"].isoformat(),
                },
            ),
        )
        await outbox_events.purged(conn, batch)
        # The batch is locked by this transaction: every row of it is deleted.
        return await queries.delete_accounts(conn, [row["id"] for row in batch])

    return await batched_run(
        db,
        batch_size=batch_size,
        dry_run=dry_run,
        count=lambda conn: queries.count_purgeable_accounts(conn, older_than_days=older_than_days),
        step=purge_batch,
        done="purged soft-deleted accounts",
    )


async def expire_invitations(
    db: Database,
    *,
    ttl_hours: int | None = None,
    batch_size: int = 500,
    dry_run: bool = False,
) -> int:
    """Soft-revoke pending invitations past their time to live; return how many.

    An invitation is past its time to live when its expires_at (set from INVITATION_TTL_HOURS
    at creation or resend) has passed, or, when `ttl_hours` is given, when it was created or
    last resent more than `ttl_hours` ago (so a lowered TTL applies to older invitations).
    A later accept answers INVITATION_EXPIRED. With dry_run nothing changes.
    """

    async def expire_batch(conn: Conn) -> int:
        batch = await queries.revoke_expired_invitations(
            conn, ttl_hours=ttl_hours, limit=batch_size
        )
        await _audited(
            conn,
            batch,
            "invitation.revoked",
            lambda row: (row["account_id"], {"email": row["email"], "reason": "expired"}),
        )
        await outbox_events.expired(conn, batch)
        return len(batch)

    return await batched_run(
        db,
        batch_size=batch_size,
        dry_run=dry_run,
        count=lambda conn: queries.count_expired_invitations(conn, ttl_hours=ttl_hours),
        step=expire_batch,
        done="expired pending invitations",
    )


@sweep("invitations", "Soft-revoke pending invitations past their time to live")
async def invitations_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    count = await expire_invitations(ctx.db, batch_size=ctx.batch_size, dry_run=ctx.dry_run)
    ctx.report("invitations", count)


@sweep("accounts", "Hard-delete accounts soft-deleted more than 30 days ago")
async def accounts_sweep(ctx: SweepContext) -> None:
    ctx.check_stopping()
    # Accounts cascade to every account-scoped row: keep those transactions small.
    batch = max(1, min(ctx.batch_size, 100))
    count = await purge_deleted_accounts(ctx.db, batch_size=batch, dry_run=ctx.dry_run)
    ctx.report("accounts", count)


SWEEPS = (invitations_sweep, accounts_sweep)
