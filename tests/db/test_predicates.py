"""tenantd/db/predicates.py: the yes-or-no answers of a query and of a write."""

from __future__ import annotations

from tenantd.db import Database
from tenantd.db.predicates import affected, exists


async def test_exists_says_whether_the_query_finds_a_row(db: Database) -> None:
    async with db.connection() as conn:
        assert await exists(conn, "SELECT 1 WHERE %(x)s > 0", {"x": 1})
        assert not await exists(conn, "SELECT 1 WHERE %(x)s > 0", {"x": 0})
        assert await exists(conn, "SELECT 1 FROM generate_series(1, 3)")


async def test_affected_says_whether_a_write_changed_a_row(db: Database) -> None:
    async with db.transaction() as conn:
        await conn.execute("CREATE TEMPORARY TABLE predicate_rows (n int) ON COMMIT DROP")
        assert await affected(conn, "INSERT INTO predicate_rows VALUES (1), (2)")
        assert await affected(conn, "UPDATE predicate_rows SET n = n + 1 WHERE n > %(n)s", {"n": 1})
        assert not await affected(conn, "DELETE FROM predicate_rows WHERE n > %(n)s", {"n": 9})
