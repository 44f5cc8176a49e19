"""OAuth fixtures: a fake OpenID provider on 127.0.0.1 and browsers that walk the flow."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tenantd.auth.oauth.client import OidcClient
from tenantd.bundle import DOMAINS
from tests.auth.oauth.fake_idp import FakeIdP
from tests.auth.oauth.support import CLIENT_ID, CLIENT_SECRET, PROVIDER, REDIRECT_URI, Browser


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "oauth_env(**vars): extra environment for the app")


@pytest.fixture
async def idp(aiohttp_server: Any) -> FakeIdP:
    fake = FakeIdP(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, redirect_uris={REDIRECT_URI})
    server = await aiohttp_server(fake.app())
    fake.issuer = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
def env(env: dict[str, str], idp: FakeIdP, request: pytest.FixtureRequest) -> dict[str, str]:
    env.update(
        {
            "OAUTH_PROVIDERS": PROVIDER,
            "OAUTH_FAKE_ISSUER": idp.issuer,
            "OAUTH_FAKE_CLIENT_ID": CLIENT_ID,
            "OAUTH_FAKE_CLIENT_SECRET": CLIENT_SECRET,
        }
    )
    marker = request.node.get_closest_marker("oauth_env")
    if marker is not None:
        env.update({k: v.format(issuer=idp.issuer) for k, v in marker.kwargs.items()})
    return env


@pytest.fixture
def server(server: TestServer) -> TestServer:
    """The app, its provider client patient: the fake provider answers from this same busy
    process, and the production 5 s connect bound is no rule these tests check (the
    timeouts are: tests/auth/oauth/test_provider_client.py)."""
    domains = server.app[DOMAINS]
    domains.auth.oidc = domains.sso.oidc = OidcClient(
        domains.kernel.http, client_timeout=aiohttp.ClientTimeout(total=60)
    )
    return server


@pytest.fixture
async def idp_session() -> AsyncIterator[aiohttp.ClientSession]:
    """The browser's view of the provider's pages (a separate session: another site)."""
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def browser(client: TestClient[Any, Any], idp_session: aiohttp.ClientSession) -> Browser:
    return Browser(client, idp_session)


@pytest.fixture
def new_browser(make_client: Any, idp_session: aiohttp.ClientSession) -> Any:
    async def make() -> Browser:
        return Browser(await make_client(), idp_session)

    return make
