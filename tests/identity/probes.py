"""The server of the auth and identity tests: two probe routes (one requireAuth, one tryAuth
that forgets its anonymous branch), no abuse limiter in the way of the flows under test, and a
cheap argon2id cost. The fixtures are imported by tests/auth/conftest.py and
tests/identity/conftest.py; tests import `probe_routes` from here."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from argon2 import PasswordHasher

from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.identity import passwords
from tenantd.principal import current_principal
from tenantd.settings import Settings
from tenantd.web.spec import Access, Routes

probe_routes = Routes("probe")


@probe_routes.get("/test/required", summary="requireAuth probe")
async def required(request: web.Request) -> dict[str, Any]:
    principal = current_principal(request)
    return {"userId": principal.user_id, "accountId": principal.account_id}


@probe_routes.get("/test/try-no-branch", access=Access.TRY, summary="tryAuth bug probe")
async def try_without_null_branch(request: web.Request) -> dict[str, Any]:
    # The bug under test: a tryAuth view that uses the user without handling anonymous.
    return {"userId": current_principal(request).user_id}


@pytest.fixture(autouse=True)
def cheap_argon2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Still argon2id, with test-sized cost: production cost times hundreds of hashes is slow."""
    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    monkeypatch.setattr(passwords, "hasher", lambda: cheap)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["RATE_LIMIT_ENABLED"] = "false"
    return env


@pytest.fixture
async def server(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any
) -> TestServer:
    app = create_app(settings, migrated, extra_routes=[probe_routes])
    return await aiohttp_server(app)
