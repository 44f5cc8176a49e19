"""Fixtures of the email tests: the fake providers, an HTTP client, an app built from env."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tenantd.app import create_app
from tenantd.db import Database
from tenantd.email.providers.retry import RetryPolicy
from tenantd.settings import load_settings
from tests.email.fake_providers import FakeProviders

Start = Callable[..., Awaitable[TestClient[Any, Any]]]


class Sleeps:
    """Records backoff delays instead of sleeping, so retry tests run fast."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def fake(aiohttp_server: Any) -> AsyncIterator[FakeProviders]:
    providers = FakeProviders()
    server: TestServer = await aiohttp_server(providers.app)
    providers.url = str(server.make_url("")).rstrip("/")
    yield providers


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
