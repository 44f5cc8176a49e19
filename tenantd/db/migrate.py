"""Apply sql/NNNN_*.sql once each, in order, under an advisory lock (safe with many instances).

Neither the wait for that lock nor a migration has a time bound: a second instance waits for
the first one's migration (however long it takes) instead of failing to start. So both run
with `statement_timeout` and `lock_timeout` off for their transaction (a role or database
may set them) and without the pool's per-operation bound (aiopg cuts any statement after
30 s).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiopg

from tenantd.db.core import Conn, Database

log = logging.getLogger(__name__)

# Any fixed 64-bit key; every instance uses the same one so only one migrates at a time.
MIGRATION_LOCK_KEY = 7_354_120_001
UNBOUNDED = float("inf")  # aiopg's operation timeout (asyncio.wait_for accepts infinity)
NO_SERVER_TIMEOUTS = "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0"


def sql_dir() -> Path:
    override = os.environ.get("TENANTD_SQL_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "sql"


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path


def available_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or sql_dir()
    files = sorted(p for p in directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    return [Migration(version=p.stem, path=p) for p in files]


async def _ensure_table(conn: Conn) -> None:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )


async def applied_versions(conn: Conn) -> set[str]:
    exists = await conn.fetch_val("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    rows = await conn.fetch_all("SELECT version FROM schema_migrations")
    return {row["version"] for row in rows}


async def pending_migrations(db: Database) -> list[Migration]:
    async with db.connection() as conn:
        done = await applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done]


@contextlib.asynccontextmanager
async def _unbounded(conn: Conn) -> AsyncIterator[aiopg.Cursor]:
    """A transaction whose statements have no time bound, client or server side."""
    async with conn.transaction(), conn.raw.cursor(timeout=UNBOUNDED) as cur:
        await cur.execute(NO_SERVER_TIMEOUTS)
        yield cur


async def _lock(conn: Conn) -> None:
    """Take the migration lock (session level), waiting as long as another instance holds it."""
    key = {"key": MIGRATION_LOCK_KEY}
    if await conn.fetch_val("SELECT pg_try_advisory_lock(%(key)s)", key):
        return
    log.info("another instance is applying migrations; waiting for it")
    async with _unbounded(conn) as cur:  # the session lock outlives this transaction
        await cur.execute("SELECT pg_advisory_lock(%(key)s)", key)


async def migrate(db: Database) -> list[str]:
    """Apply every pending migration; return the versions applied by this call."""
    applied: list[str] = []
    async with db.connection() as conn:
        await _lock(conn)
        try:
            await _ensure_table(conn)
            done = await applied_versions(conn)
            for migration in available_migrations():
                if migration.version in done:
                    continue
                log.info("applying migration %s", migration.version)
                async with _unbounded(conn) as cur:
                    await cur.execute(migration.path.read_text())
                    await conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES (%(v)s)",
                        {"v": migration.version},
                    )
                applied.append(migration.version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%(key)s)", {"key": MIGRATION_LOCK_KEY})
    return applied
