"""Fetch shapes that queries share: the same statement, the same round trip, a narrower result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tenantd.db.core import Conn, Row, Statement


async def fetch_row(conn: Conn, stmt: Statement, params: Mapping[str, Any] | None = None) -> Row:
    """The row a statement always returns: an INSERT … RETURNING, an UPDATE … RETURNING of a
    row the caller holds, an aggregate. No row is a bug, not an answer."""
    row = await conn.fetch_one(stmt, params)
    assert row is not None
    return row


async def fetch_column(
    conn: Conn, stmt: Statement, params: Mapping[str, Any] | None = None
) -> list[Any]:
    """The first (only) column of every row, in the statement's order."""
    return [next(iter(row.values())) for row in await conn.fetch_all(stmt, params)]
