"""Apply sql/NNNN_*.sql once each, in order, under an advisory lock (safe with many instances),
then re-apply sql/functions/*.sql (CREATE OR REPLACE FUNCTION: the one definition of each
SQL function, kept out of the forward-only migrations so that a rule is written once).

Neither the wait for that lock nor a migration has a time bound: a second instance waits for
the first one's migration (however long it takes) instead of failing to start. So both run
with `statement_timeout` and `lock_timeout` off for their transaction (a role or database
may set them) and without the pool's per-operation bound (aiopg cuts any statement after
30 s).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiopg

from tenantd.db import queries
from tenantd.db.core import Conn, Database

log = logging.getLogger(__name__)

UNBOUNDED = float("inf")  # aiopg's operation timeout (asyncio.wait_for accepts infinity)


SQL_DIR = Path(__file__).resolve().parents[2] / "sql"  # the migrations shipped with tenantd


def sql_dir(directory: Path | None = None) -> Path:
    """`directory` (TENANTD_SQL_DIR, `DatabaseSettings.sql_dir`) or the shipped sql/."""
    return directory or SQL_DIR


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path


def available_migrations(directory: Path | None = None) -> list[Migration]:
    files = sorted(p for p in sql_dir(directory).glob("[0-9][0-9][0-9][0-9]_*.sql"))
    return [Migration(version=p.stem, path=p) for p in files]


def function_files(directory: Path | None = None) -> list[Path]:
    """The SQL function files every migrate re-applies, in name order."""
    return sorted(sql_dir(directory).glob("functions/*.sql"))


async def pending_migrations(db: Database, directory: Path | None = None) -> list[Migration]:
    async with db.connection() as conn:
        done = await queries.applied_versions(conn)
    return [m for m in available_migrations(directory) if m.version not in done]


@contextlib.asynccontextmanager
async def _unbounded(conn: Conn) -> AsyncIterator[aiopg.Cursor]:
    """A transaction whose statements have no time bound, client or server side."""
    async with conn.transaction(), conn.raw.cursor(timeout=UNBOUNDED) as cur:
        await cur.execute(queries.NO_SERVER_TIMEOUTS)
        yield cur


async def _lock(conn: Conn) -> None:
    """Take the migration lock (session level), waiting as long as another instance holds it."""
    if await queries.try_lock(conn):
        return
    log.info("another instance is applying migrations; waiting for it")
    async with _unbounded(conn) as cur:  # the session lock outlives this transaction
        await cur.execute(queries.WAIT_FOR_LOCK, queries.LOCK_PARAMS)


async def migrate(db: Database, directory: Path | None = None) -> list[str]:
    """Apply every pending migration (of `directory`, default the shipped sql/), then every
    function file (idempotent); return the
    versions applied by this call."""
    applied: list[str] = []
    async with db.connection() as conn:
        await _lock(conn)
        try:
            await queries.ensure_migrations_table(conn)
            done = await queries.applied_versions(conn)
            for migration in available_migrations(directory):
                if migration.version in done:
                    continue
                log.info("applying migration %s", migration.version)
                async with _unbounded(conn) as cur:
                    await cur.execute(migration.path.read_text())
                    await queries.record_migration(conn, migration.version)
                applied.append(migration.version)
            async with _unbounded(conn) as cur:
                for path in function_files(directory):
                    await cur.execute(path.read_text())
        finally:
            await queries.unlock(conn)
    return applied
