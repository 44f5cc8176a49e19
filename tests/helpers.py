"""What every test module may import: the test origin and secret, answer unwrapping, a
poll-until-true helper and emptying the database. Fixtures live in conftest.py; nothing is
imported from there."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenantd.db import Database

ORIGIN = "http://127.0.0.1:8080"
SECRET = "test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
PASSWORD = "a long enough passphrase"
KEEP_TABLES = {"plans", "schema_migrations"}


async def data(response: Any, status: int = 200) -> Any:
    """The `data` of a success envelope, after checking the status."""
    body = await response.json()
    assert response.status == status, body
    assert body["success"] is True, body
    return body["data"]


def error_of(body: dict[str, Any]) -> dict[str, Any]:
    """The `error` of an already parsed failure envelope."""
    assert body["success"] is False, body
    result: dict[str, Any] = body["error"]
    return result


async def error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The `error` of a failure envelope, after checking the status (and code if given)."""
    body = await response.json()
    assert response.status == status, body
    result = error_of(body)
    if code is not None:
        assert result["code"] == code, body
    return result


async def eventually(
    check: Callable[[], Any | Awaitable[Any]], *, within: float = 30.0, interval: float = 0.02
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy and return that. The
    bound is generous because the machine is shared; a check that holds returns at once."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


async def truncate_all(db: Database) -> None:
    """Empty every table but the seeded ones (plans, schema_migrations)."""
    rows = await db.fetch_all("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    names = [r["tablename"] for r in rows if r["tablename"] not in KEEP_TABLES]
    if names:
        await db.execute(f"TRUNCATE {', '.join(names)} RESTART IDENTITY CASCADE")
