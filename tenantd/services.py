"""Services: the one bundle of long-lived resources that views, jobs and the CLI share."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.email.service import EmailService
from tenantd.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    db: Database
    http: aiohttp.ClientSession
    email: EmailService
    # Filled by the domains that own them (notifications registry, job queue, SSE hub, ...).
    extras: dict[str, Any] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def open_services(settings: Settings, database_url: str) -> AsyncIterator[Services]:
    """Open the pool and the shared HTTP client; close them in reverse order."""
    db = await create_database(
        url_to_dsn(database_url), minsize=settings.db_pool_min, maxsize=settings.db_pool_max
    )
    timeout = aiohttp.ClientTimeout(total=15, connect=5)
    http = aiohttp.ClientSession(timeout=timeout)
    try:
        email = EmailService.from_settings(settings, db=db, http=http)
        yield Services(settings=settings, db=db, http=http, email=email)
    finally:
        await http.close()
        await db.close()
