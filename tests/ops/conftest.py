"""Fixtures of the ops tests: Domains opened without an app (as `tenantd serve` and the CLI
do); the app's own services are the `services` fixture of tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tenantd.app.bundle import Domains, open_services
from tenantd.db import Database
from tenantd.settings import Settings


@pytest.fixture
async def standalone_services(
    db: Database, settings: Settings, migrated: str
) -> AsyncIterator[Domains]:
    async with open_services(settings, migrated) as opened:
        yield opened


@pytest.fixture
async def other_services(db: Database, settings: Settings, migrated: str) -> AsyncIterator[Domains]:
    """A second, independent pool: stands in for another instance."""
    async with open_services(settings, migrated) as opened:
        yield opened
