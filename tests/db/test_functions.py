"""SQL functions live in sql/functions/*.sql, written once and re-applied by every migrate
after the forward migrations: migrating again changes nothing and keeps them working."""

from __future__ import annotations

import re
import uuid

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import available_migrations, function_files, migrate, sql_dir
from tests.ops.servers import fresh_database

DEFINITIONS = (
    "SELECT p.proname, pg_get_functiondef(p.oid) AS body FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'public' AND p.proname = ANY(%(names)s) ORDER BY p.proname"
)


def defined_names() -> list[str]:
    names = []
    for path in function_files():
        names += re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(", path.read_text())
    return names


def test_each_function_is_defined_once_outside_the_migrations() -> None:
    names = defined_names()
    assert "tenantd_notification_dispatch" in names
    assert "tenantd_notification_dispatch_batch" in names
    assert len(names) == len(set(names))
    for migration in available_migrations():
        text = migration.path.read_text()
        for name in names:
            assert not re.search(rf"FUNCTION {name}\(", text), (migration.version, name)
    assert all(path.parent == sql_dir() / "functions" for path in function_files())


async def test_migrating_twice_reapplies_the_functions_and_changes_nothing(
    migrated: str,
) -> None:
    with fresh_database(migrated) as url:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            first = await migrate(db)
            assert first == [m.version for m in available_migrations()]
            names = {"names": defined_names()}
            before = await db.fetch_all(DEFINITIONS, names)
            assert [row["proname"] for row in before] == sorted(names["names"])
            assert await migrate(db) == []
            assert await migrate(db) == []
            assert await db.fetch_all(DEFINITIONS, names) == before
            # The re-applied functions still answer: an unknown recipient writes nothing.
            row = await db.fetch_one(
                "SELECT * FROM tenantd_notification_dispatch(%(id)s, %(uid)s, NULL, 't', 'a',"
                " 'b', '', '', '{}'::jsonb, NULL, 0, ARRAY['in_app'], NULL, false, 'x')",
                {"id": uuid.uuid4(), "uid": uuid.uuid4()},
            )
            assert row is not None
            assert (row["user_found"], row["id"], row["pending"]) == (False, None, [])
        finally:
            await db.close()
