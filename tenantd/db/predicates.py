"""Yes-or-no questions that queries share: whether a query finds a row, whether a write
changed one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tenantd.db.core import Conn, Statement


async def exists(conn: Conn, query: str, params: Mapping[str, Any] | None = None) -> bool:
    """Whether the SELECT `query` finds a row (asked as SELECT EXISTS: it stops at the first)."""
    return bool(await conn.fetch_val(f"SELECT EXISTS ({query})", params))


async def affected(conn: Conn, stmt: Statement, params: Mapping[str, Any] | None = None) -> bool:
    """Whether an INSERT, UPDATE or DELETE wrote a row (its row count, no RETURNING needed)."""
    return await conn.execute(stmt, params) > 0
