"""Assertions and builders shared by the tenancy tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tenantd.principal import Principal
from tests.factories import UserRecord


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


async def data(response: Any, status: int = 200) -> Any:
    body = await response.json()
    assert response.status == status, body
    assert body["success"] is True, body
    return body["data"]


async def error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    body = await response.json()
    assert response.status == status, body
    assert body["success"] is False, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


async def audit_actions(db: Any, account_id: uuid.UUID) -> list[str]:
    rows = await db.fetch_all(
        "SELECT action FROM audit_log WHERE account_id = %(a)s ORDER BY id", {"a": account_id}
    )
    return [row["action"] for row in rows]
