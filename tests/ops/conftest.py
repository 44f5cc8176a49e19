"""Fixtures of the ops tests: open Services (as `tenantd serve` and the CLI do)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tenantd.db import Database
from tenantd.services import Services, open_services
from tenantd.settings import Settings


@pytest.fixture
async def services(db: Database, settings: Settings, migrated: str) -> AsyncIterator[Services]:
    async with open_services(settings, migrated) as opened:
        yield opened


@pytest.fixture
async def other_services(
    db: Database, settings: Settings, migrated: str
) -> AsyncIterator[Services]:
    """A second, independent pool: stands in for another instance."""
    async with open_services(settings, migrated) as opened:
        yield opened
