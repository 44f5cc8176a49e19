"""Migration 0106 chains the audit rows written before it: per account, in id order, and the
result verifies like rows chained at insert."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tenantd.audit import chain
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import available_migrations, migrate
from tests.ops.servers import fresh_database


async def test_rows_from_before_the_chain_are_chained_by_the_migration(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = tmp_path / "sql"
    before.mkdir()
    for migration in available_migrations():
        if migration.version < "0106":
            shutil.copy(migration.path, before / migration.path.name)
    a, b = uuid.uuid4(), uuid.uuid4()
    with fresh_database(migrated) as url:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            await migrate(db, before)
            for account, action in [(a, "x1"), (b, "y1"), (None, "z1"), (a, "x2"), (b, "y2")]:
                await db.execute(
                    "INSERT INTO audit_log (account_id, action, data) VALUES"
                    ' (%(a)s, %(x)s, \'{"k": [1, "é"]}\')',
                    {"a": account, "x": action},
                )
            applied = await migrate(db)
            assert "0106_audit_chain" in applied
            result = await chain.verify(db)
            assert result.broken is None and result.rows == 5 and len(result.heads) == 3
            rows = await db.fetch_all(
                "SELECT action, prev_hash, row_hash FROM audit_log WHERE account_id = %(a)s"
                " ORDER BY id",
                {"a": a},
            )
            assert [r["action"] for r in rows] == ["x1", "x2"]
            assert bytes(rows[0]["prev_hash"]) == bytes(32)
            assert bytes(rows[1]["prev_hash"]) == bytes(rows[0]["row_hash"])
            # New rows continue the migrated chain.
            await db.execute(
                "INSERT INTO audit_log (account_id, action) VALUES (%(a)s, 'x3')", {"a": a}
            )
            assert (await chain.verify(db, account_id=a)).rows == 3
        finally:
            await db.close()
