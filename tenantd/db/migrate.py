"""Apply sql/NNNN_*.sql once each, in order, under an advisory lock (safe with many instances)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tenantd.db.core import Conn, Database

log = logging.getLogger(__name__)

# Any fixed 64-bit key; every instance uses the same one so only one migrates at a time.
MIGRATION_LOCK_KEY = 7_354_120_001


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


async def migrate(db: Database) -> list[str]:
    """Apply every pending migration; return the versions applied by this call."""
    applied: list[str] = []
    async with db.connection() as conn:
        await conn.execute("SELECT pg_advisory_lock(%(key)s)", {"key": MIGRATION_LOCK_KEY})
        try:
            await _ensure_table(conn)
            done = await applied_versions(conn)
            for migration in available_migrations():
                if migration.version in done:
                    continue
                log.info("applying migration %s", migration.version)
                async with conn.transaction():
                    await conn.execute(migration.path.read_text())
                    await conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES (%(v)s)",
                        {"v": migration.version},
                    )
                applied.append(migration.version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%(key)s)", {"key": MIGRATION_LOCK_KEY})
    return applied
