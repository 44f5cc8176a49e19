"""Fixtures of the email tests: an HTTP client, retry policies, an app built from env (the
fake providers are the `fake` fixture of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.email.providers.retry import RetryPolicy
from tests.email.support import Sleeps, Start


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def policy(sleeps: Sleeps) -> RetryPolicy:
    return RetryPolicy(attempts=3, base_delay=0.2, max_delay=1.0, timeout=2.0, sleep=sleeps)


@pytest.fixture
def start(db: Database, env: dict[str, str], migrated: str, aiohttp_client: Any) -> Start:
    """Start the real app with env overrides (a None value removes a variable)."""

    async def start(**overrides: str | None) -> TestClient[Any, Any]:
        merged: dict[str, str] = {**env}
        for name, value in overrides.items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        app = create_app(load_settings(environ=merged), migrated)
        client: TestClient[Any, Any] = await aiohttp_client(app)
        return client

    return start
