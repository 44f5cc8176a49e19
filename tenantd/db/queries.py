"""The SQL of the migration runner: its bookkeeping table and its advisory lock."""

from __future__ import annotations

from tenantd.db.core import Conn
from tenantd.db.fetch import fetch_column

# A round trip: the database answers (health checks).
PING = "SELECT 1"

# Any fixed 64-bit key; every instance uses the same one so only one migrates at a time.
MIGRATION_LOCK_KEY = 7_354_120_001

# Run on a raw cursor at the start of an unbounded migration transaction.
NO_SERVER_TIMEOUTS = "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0"
# Run on a raw cursor: waits, with no bound, for the instance that holds the lock.
WAIT_FOR_LOCK = "SELECT pg_advisory_lock(%(key)s)"
LOCK_PARAMS = {"key": MIGRATION_LOCK_KEY}


async def try_lock(conn: Conn) -> bool:
    """Take the migration lock (session level) if no other instance holds it."""
    return bool(await conn.fetch_val("SELECT pg_try_advisory_lock(%(key)s)", LOCK_PARAMS))


async def unlock(conn: Conn) -> None:
    await conn.execute("SELECT pg_advisory_unlock(%(key)s)", LOCK_PARAMS)


async def ensure_migrations_table(conn: Conn) -> None:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )


async def applied_versions(conn: Conn) -> set[str]:
    """The versions recorded as applied (none before the first migration)."""
    exists = await conn.fetch_val("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    return set(await fetch_column(conn, "SELECT version FROM schema_migrations"))


async def record_migration(conn: Conn, version: str) -> None:
    await conn.execute("INSERT INTO schema_migrations (version) VALUES (%(v)s)", {"v": version})
