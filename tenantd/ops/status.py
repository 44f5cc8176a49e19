"""What `tenantd status` reports: version, database, migrations, queue, channels, sweeps, and
each running instance as it reports itself, with where this configuration differs from it."""

from __future__ import annotations

import asyncio
from typing import Any

from tenantd import __version__
from tenantd.db import Database
from tenantd.db.migrate import available_migrations
from tenantd.db.queries import applied_versions
from tenantd.ops import queries
from tenantd.ops.instances import differences, read_instances, switches
from tenantd.settings import Settings

STATUS_TIMEOUT = 5.0


def channels(settings: Settings) -> dict[str, Any]:
    """The notification channels this configuration has."""
    switched = settings.switches()
    return {
        "in_app": True,
        "email": switched["EMAIL_PROVIDER"],
        "sse": switched["NOTIFICATIONS_SSE_ENABLED"],
        "web_push": switched["WEB_PUSH"],
    }


async def gather_status(
    db: Database | None, settings: Settings, env_file: str | None = None
) -> dict[str, Any]:
    """Everything `tenantd status` shows; `ok` is false when the service is not ready.

    `queuesEnabled`, `channels` and `config` are this process's configuration (read from
    `env_file` under the environment); `instances` what each `tenantd serve` reports, each
    with the `differences` between the two."""
    mine = switches(settings)
    status: dict[str, Any] = {
        "version": __version__,
        "database": "unavailable",
        "migrations": {"applied": None, "pending": None},
        "queue": None,
        "queuesEnabled": mine["QUEUES_ENABLED"],
        "channels": channels(settings),
        "sweeps": [],
        "config": {"envFile": env_file, "switches": mine},
        "instances": None,
        "ok": False,
    }
    if db is None:
        return status
    try:
        async with asyncio.timeout(STATUS_TIMEOUT), db.connection() as conn:
            done = await applied_versions(conn)
            pending = [
                m.version
                for m in available_migrations(settings.database.sql_dir)
                if m.version not in done
            ]
            status["database"] = "ok"
            status["migrations"] = {"applied": len(done), "pending": pending}
            tables = await conn.fetch_val(queries.STATUS_TABLES)
            if tables == 2:
                status["queue"] = await conn.fetch_one(queries.STATUS_QUEUE)
                status["sweeps"] = await conn.fetch_all(queries.STATUS_SWEEPS)
        async with asyncio.timeout(STATUS_TIMEOUT):
            instances = await read_instances(db)
    except Exception as error:
        status["error"] = f"{type(error).__name__}: {error}".strip()[:300]
        return status
    for instance in instances or ():
        instance["differences"] = differences(mine, instance["switches"])
    status["instances"] = instances
    status["ok"] = not status["migrations"]["pending"]
    return status
