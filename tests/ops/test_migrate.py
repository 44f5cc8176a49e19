"""`migrate` waits for another instance's migration lock however long it is held: neither a
server-side statement_timeout nor the pool's per-operation bound cuts the wait."""

from __future__ import annotations

import asyncio

import aiopg

from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import available_migrations, migrate
from tenantd.db.queries import MIGRATION_LOCK_KEY
from tests.helpers import eventually
from tests.ops.servers import fresh_database

BOUND_SECONDS = 0.5  # this instance's statement bounds, server and client side


async def test_a_second_instance_waits_out_the_first_ones_migration(migrated: str) -> None:
    with fresh_database(migrated) as url:
        dsn = url_to_dsn(url)
        first = await aiopg.connect(dsn, enable_hstore=False)  # another instance, migrating
        try:
            async with first.cursor() as cur:
                await cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
            pool = await aiopg.create_pool(
                f"{dsn} options='-c statement_timeout={int(BOUND_SECONDS * 1000)}'",
                minsize=1,
                maxsize=1,
                timeout=BOUND_SECONDS * 2,
                enable_hstore=False,
            )
            db = Database(pool)
            try:
                second = asyncio.create_task(migrate(db))

                async def waited_past_the_bounds() -> bool:
                    if second.done():
                        second.result()  # it gave up: show why
                        raise AssertionError("migrate returned while the lock was held")
                    async with first.cursor() as cur:
                        await cur.execute(
                            "SELECT count(*) FROM pg_stat_activity"
                            " WHERE datname = current_database()"
                            "   AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
                            "   AND now() - query_start > make_interval(secs => %s)",
                            (BOUND_SECONDS * 4,),
                        )
                        row = await cur.fetchone()
                    return bool(row and row[0] == 1)

                await eventually(waited_past_the_bounds, within=30, interval=0.1)
                async with first.cursor() as cur:
                    await cur.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
                applied = await asyncio.wait_for(second, 120)
                assert applied == [m.version for m in available_migrations()]
                # The statement bound still holds outside the migration.
                async with pool.acquire() as conn, conn.cursor() as cur:
                    await cur.execute("SHOW statement_timeout")
                    assert await cur.fetchone() == (f"{int(BOUND_SECONDS * 1000)}ms",)
            finally:
                await db.close()
        finally:
            await first.close()
