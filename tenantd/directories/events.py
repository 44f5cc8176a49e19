"""The directory events of the outbox (directory.user.*, directory.group.*), written in the
change's transaction. The actor is the directory: `{type: system, id: directory:<id>}`."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.db import Conn, Row
from tenantd.outbox import Actor, emit


def actor(directory_id: uuid.UUID) -> Actor:
    return Actor.system(f"directory:{directory_id}")


def _identity(row: Row, account_id: uuid.UUID) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "directoryId": str(row["directory_id"]),
        "accountId": str(account_id),
    }


def user_data(row: Row, *, account_id: uuid.UUID) -> dict[str, Any]:
    return {
        **_identity(row, account_id),
        "userId": str(row["user_id"]) if row["user_id"] is not None else None,
        "userName": row["user_name"],
        "externalId": row["external_id"],
        "active": row["active"],
    }


def group_data(row: Row, *, account_id: uuid.UUID, members: list[uuid.UUID]) -> dict[str, Any]:
    return {
        **_identity(row, account_id),
        "displayName": row["display_name"],
        "externalId": row["external_id"],
        "role": row["role"],
        "members": [str(member) for member in members],
    }


async def _emit(
    conn: Conn,
    type_: str,
    row: Row,
    subject: str,
    *,
    account_id: uuid.UUID,
    data: dict[str, Any],
    previous: dict[str, Any] | None,
) -> None:
    await emit(
        conn,
        type_,
        account_id=account_id,
        actor=actor(row["directory_id"]),
        data=data,
        previous=previous,
        subject=f"{subject}:{row['id']}",
    )


async def user_changed(
    conn: Conn,
    type_: str,
    row: Row,
    *,
    account_id: uuid.UUID,
    previous: dict[str, Any] | None = None,
) -> None:
    """directory.user.created / .updated / .deleted."""
    data = user_data(row, account_id=account_id)
    await _emit(
        conn, type_, row, "directory_user", account_id=account_id, data=data, previous=previous
    )


async def group_changed(
    conn: Conn,
    type_: str,
    row: Row,
    *,
    account_id: uuid.UUID,
    members: list[uuid.UUID],
    previous: dict[str, Any] | None = None,
) -> None:
    """directory.group.created / .updated / .deleted."""
    data = group_data(row, account_id=account_id, members=members)
    await _emit(
        conn, type_, row, "directory_group", account_id=account_id, data=data, previous=previous
    )
