"""The user and session events of the outbox (user.*, session.revoked_all), written in the
change's transaction."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.db import Conn
from tenantd.identity import queries
from tenantd.outbox import Actor, emit, payload

USER_FIELDS = (
    "id", "email", "first_name", "last_name", "email_verified_at", "created_at", "updated_at"
)  # fmt: skip


async def user_changed(
    conn: Conn,
    type_: str,
    user_id: uuid.UUID,
    *,
    actor: Actor | None = None,
    previous: dict[str, Any] | None = None,
) -> None:
    """user.created / user.email_verified / user.updated with the user as it is now."""
    row = await queries.user_event_row(conn, user_id)
    assert row is not None
    data = payload(row, USER_FIELDS)
    data["emailVerified"] = row["email_verified_at"] is not None
    data["hasPasswordLogin"] = row["has_password"]
    await emit(
        conn,
        type_,
        account_id=None,
        actor=actor or Actor.user(user_id),
        data=data,
        previous=previous,
    )


async def sessions_revoked(conn: Conn, user_id: uuid.UUID, *, actor: Actor | None = None) -> None:
    await emit(
        conn,
        "session.revoked_all",
        account_id=None,
        actor=actor or Actor.user(user_id),
        data={"userId": str(user_id)},
        subject=f"user:{user_id}",
    )
