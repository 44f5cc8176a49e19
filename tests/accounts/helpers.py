"""Builders shared by the tenancy tests (answer unwrapping is in tests/helpers.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tenantd.principal import Principal
from tests.factories import UserRecord

# The `login` fixture: a browser signed in as a user (into an account, default its own).
Login = Callable[..., Awaitable[Any]]


def principal(user: UserRecord, account_id: uuid.UUID | None, role: str | None = None) -> Principal:
    """A principal as the guard would build it, for calling services directly."""
    now = time.time()
    return Principal(
        user_id=user.id,
        account_id=account_id,
        role=role,
        jti=uuid.uuid4(),
        issued_at=now,
        expires_at=now + 900,
        amr=("pwd",),
        auth_time=now,  # a fresh sign-in: step-up checks pass
    )


@dataclass
class Team:
    """An account with an owner, an admin and a member, each in a signed-in browser."""

    account_id: uuid.UUID
    owner: UserRecord
    admin: UserRecord
    member: UserRecord
    owner_client: Any
    admin_client: Any
    member_client: Any


async def audit_actions(db: Any, account_id: uuid.UUID) -> list[str]:
    rows = await db.fetch_all(
        "SELECT action FROM audit_log WHERE account_id = %(a)s ORDER BY id", {"a": account_id}
    )
    return [row["action"] for row in rows]
