"""Readiness: the database answers, every migration file is applied, and (with SSE on) the
pub/sub listener of this process is connected."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenantd.db import Database
from tenantd.db.migrate import pending_migrations
from tenantd.pubsub.bus import Bus
from tenantd.settings import Settings

READY_TIMEOUT = 2.0


@dataclass
class Readiness:
    ready: bool
    checks: dict[str, Any] = field(default_factory=dict)


async def check_readiness(
    db: Database,
    *,
    sql_dir: Path | None = None,
    sse_enabled: bool,
    listener_connected: Callable[[], bool | None] | None,
) -> Readiness:
    """Every check of /readyz; `ready` only when all pass."""
    checks: dict[str, Any] = {}
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            pending = await pending_migrations(db, sql_dir)
        checks["database"] = "ok"
        checks["migrations"] = "ok" if not pending else "pending"
        if pending:
            checks["pendingMigrations"] = [m.version for m in pending]
    except Exception:
        checks["database"] = "unavailable"
        checks["migrations"] = "unknown"
    if sse_enabled:
        connected = listener_connected() if listener_connected is not None else None
        checks["sseListener"] = {True: "ok", False: "disconnected", None: "unknown"}[connected]
    ready = (
        checks["database"] == "ok"
        and checks["migrations"] == "ok"
        and checks.get("sseListener", "ok") == "ok"
    )
    return Readiness(ready=ready, checks=checks)


async def readiness(db: Database, settings: Settings, hub: Bus | None) -> Readiness:
    """The checks of /readyz for this process: its database, migrations and listener."""
    return await check_readiness(
        db,
        sql_dir=settings.database.sql_dir,
        # The listener is needed by the SSE streams (a switch of the notifications section).
        sse_enabled=bool(settings.switches().get("NOTIFICATIONS_SSE_ENABLED")),
        # Connected, and its loops alive: a hub whose reader died hears nothing (no stream
        # gets a message, no cache an invalidation) even with its connection open.
        listener_connected=(
            (lambda: hub.is_connected() and hub.alive()) if hub is not None else None
        ),
    )
