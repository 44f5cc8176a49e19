"""API-key test fixtures: the server carries the probe routes of tests/apikeys/helpers.py."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tenantd.db import Database
from tenantd.settings import Settings
from tests.apikeys.helpers import probe_app


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["RATE_LIMIT_ENABLED"] = "false"
    return env


@pytest.fixture
async def server(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any
) -> TestServer:
    return await aiohttp_server(probe_app(settings, migrated))
