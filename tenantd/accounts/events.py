"""The tenancy events of the outbox (account.*, membership.*, ownership.*, invitation.*,
join_request.*, role.*): one call per change, in the change's transaction."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tenantd import audit
from tenantd.accounts import queries
from tenantd.db import Conn, Row
from tenantd.outbox import Actor, Event, emit, emit_many, payload

ACCOUNT_FIELDS = ("id", "name", "claimed_domain", "created_at", "deleted_at")
MEMBERSHIP_FIELDS = ("id", "account_id", "user_id", "role", "created_at", "revoked_at")
INVITATION_FIELDS = (
    "id", "account_id", "email", "role", "created_at", "expires_at", "accepted_at", "revoked_at"
)  # fmt: skip


def actor_of(user_id: uuid.UUID | None) -> Actor:
    """A user, or the operator at the CLI when there is none."""
    return Actor.user(user_id) if user_id is not None else Actor.operator()


async def account_row(conn: Conn, account_id: uuid.UUID) -> Row:
    row = await queries.account_event_row(conn, account_id)
    assert row is not None
    return row


async def account(
    conn: Conn,
    type_: str,
    account_id: uuid.UUID,
    actor: Actor,
    *,
    previous: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    data = payload(await account_row(conn, account_id), ACCOUNT_FIELDS)
    data.update(extra or {})
    await emit(conn, type_, account_id=account_id, actor=actor, data=data, previous=previous)


async def _of_row(
    conn: Conn,
    type_: str,
    row: Row,
    actor: Actor,
    fields: tuple[str, ...],
    *,
    previous: dict[str, Any] | None,
    subject: str | None = None,
) -> None:
    """The event of an account-scoped row: its `fields` as the data."""
    await emit(
        conn,
        type_,
        account_id=row["account_id"],
        actor=actor,
        data=payload(row, fields),
        previous=previous,
        subject=subject,
    )


async def membership(
    conn: Conn, type_: str, row: Row, actor: Actor, *, previous: dict[str, Any] | None = None
) -> None:
    await _of_row(conn, type_, row, actor, MEMBERSHIP_FIELDS, previous=previous)


async def account_audited(
    conn: Conn,
    account_id: uuid.UUID,
    by: uuid.UUID | None,
    action: str,
    data: dict[str, Any] | None = None,
) -> None:
    """The audit row of a change to the account itself (the target): `by` the acting user,
    None for none (the operator)."""
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=by,
        action=action,
        target=str(account_id),
        data=data,
    )


async def audited_change(
    conn: Conn, type_: str, row: Row, *, by: uuid.UUID | None, data: dict[str, Any]
) -> None:
    """The audit row of a written membership.* or role.* change (`by` the acting user, None
    for none; the target the member or the role's key); `change` writes its event too."""
    target_field = _CHANGES[type_.split(".")[0]][1]
    await audit.record(
        conn,
        account_id=row["account_id"],
        actor_user_id=by,
        action=type_,
        target=str(row[target_field]),
        data=data,
    )


async def change(
    conn: Conn,
    type_: str,
    row: Row,
    *,
    by: uuid.UUID | None,
    data: dict[str, Any],
    previous: dict[str, Any] | None = None,
    actor: Actor | None = None,
) -> Row:
    """A written membership.* or role.* change: its audit row (`by` the acting user, None for
    none; the target the member or the role's key) and its outbox event of the same type, the
    event's actor `by` unless given (a directory acting for no user). Returns `row`."""
    await audited_change(conn, type_, row, by=by, data=data)
    event = _CHANGES[type_.split(".")[0]][0]
    await event(conn, type_, row, actor or actor_of(by), previous=previous)
    return row


def invitation_data(row: Row) -> dict[str, Any]:
    data = payload(row, INVITATION_FIELDS)
    data["status"] = (
        "accepted"
        if row["accepted_at"] is not None
        else "revoked"
        if row["revoked_at"] is not None
        else "pending"
    )
    return data


async def invitation(conn: Conn, type_: str, row: Row, actor: Actor) -> None:
    await emit(conn, type_, account_id=row["account_id"], actor=actor, data=invitation_data(row))


async def join_request(conn: Conn, type_: str, request_id: uuid.UUID, *, by: uuid.UUID) -> None:
    """A written join_request.* change: its audit row (`by` the acting user, the target the
    request, its requester and domain as the data) and its outbox event of the same type."""
    row = await queries.join_request_event_row(conn, request_id)
    assert row is not None
    await audit.record(
        conn,
        account_id=row["account_id"],
        actor_user_id=by,
        action=type_,
        target=str(request_id),
        data={"userId": str(row["user_id"]), "domain": row["domain"]},
    )
    await emit(conn, type_, account_id=row["account_id"], actor=actor_of(by), data=payload(row))


async def ownership_transferred(
    conn: Conn, *, account_id: uuid.UUID, previous_owner: Row, owner: Row, actor: Actor
) -> None:
    await emit(
        conn,
        "ownership.transferred",
        account_id=account_id,
        actor=actor,
        data={
            "accountId": str(account_id),
            "ownerUserId": str(owner["user_id"]),
            "previousOwnerUserId": str(previous_owner["user_id"]),
        },
        previous={"ownerUserId": str(previous_owner["user_id"])},
        subject=f"account:{account_id}",
    )


async def purged(conn: Conn, rows: list[Row]) -> None:
    """account.purged for each hard-deleted account (the sweep's batch)."""
    now = dt.datetime.now(dt.UTC)
    await emit_many(
        conn,
        [
            Event(
                "account.purged",
                row["id"],
                Actor.system("accounts-sweep"),
                {**payload(row, ("id", "name", "claimed_domain", "deleted_at")), "purgedAt": now},
            )
            for row in rows
        ],
    )


async def expired(conn: Conn, rows: list[Row]) -> None:
    """invitation.expired for each invitation the sweep revoked."""
    await emit_many(
        conn,
        [
            Event(
                "invitation.expired",
                row["account_id"],
                Actor.system("invitations-sweep"),
                {**payload(row, ("id", "account_id", "email")), "status": "expired"},
            )
            for row in rows
        ],
    )


ROLE_FIELDS = ("key", "account_id", "name", "permissions", "created_at", "updated_at")


async def role(
    conn: Conn, type_: str, row: Row, actor: Actor, *, previous: dict[str, Any] | None = None
) -> None:
    """role.created, role.updated (previous: what changed), role.deleted."""
    subject = f"role:{row['key']}"
    await _of_row(conn, type_, row, actor, ROLE_FIELDS, previous=previous, subject=subject)


# What `change` writes per kind: the event's emitter and the row field the audit row targets.
_CHANGES: dict[str, tuple[Callable[..., Awaitable[None]], str]] = {
    "membership": (membership, "user_id"),
    "role": (role, "key"),
}
