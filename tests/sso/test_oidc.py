"""OpenID Connect connections against the local fake OpenID provider of the OAuth tests
(today's code flow, scoped to the account), and enforcement refusing social sign-in."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tenantd.auth.oauth.client import OidcClient
from tenantd.bundle import DOMAINS
from tests.accounts.helpers import Team
from tests.auth.oauth.conftest import env, idp, idp_session
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import CLIENT_ID, CLIENT_SECRET, Browser, login_error
from tests.helpers import ORIGIN, data

__all__ = ["env", "idp", "idp_session"]


@pytest.fixture
def server(server: TestServer) -> TestServer:
    """The provider client patient, as in the OAuth tests (the fake answers from this same
    busy process)."""
    domains = server.app[DOMAINS]
    domains.auth.oidc = domains.sso.oidc = OidcClient(
        domains.kernel.http, client_timeout=aiohttp.ClientTimeout(total=60)
    )
    return server


async def add_oidc(team: Team, idp: FakeIdP, **extra: Any) -> dict[str, Any]:
    body = {
        "type": "oidc",
        "domains": ["acme.example.com"],
        "issuer": idp.issuer,
        "clientId": CLIENT_ID,
        "clientSecret": CLIENT_SECRET,
        **extra,
    }
    url = f"/api/v1/accounts/{team.account_id}/sso-connections"
    connection: dict[str, Any] = await data(await team.owner_client.post(url, json=body), 201)
    idp.redirect_uris.add(connection["redirectUri"])
    assert connection["redirectUri"] == f"{ORIGIN}/sso/oidc/{connection['id']}/callback"
    return connection


async def sso_sign_in(browser: Browser, connection: dict[str, Any], **params: str) -> Any:
    start = await browser.client.get(
        "/sso/start", params={"connection": connection["id"], **params}, allow_redirects=False
    )
    assert start.status == 302, await start.text()
    return await browser.callback(await browser.authorize(start.headers["Location"]))


async def test_oidc_connection_signs_in_and_joins_with_mapped_groups(
    team: Team, idp: FakeIdP, make_client: Any, idp_session: aiohttp.ClientSession, db: Any
) -> None:
    idp.user = FakeUser(sub="okta-1", email="dana@acme.example.com", given_name="Dana")
    idp.claim_overrides = {"groups": ["Engineering", "tenantd-admins"]}
    connection = await add_oidc(team, idp, groupRoles={"tenantd-admins": "admin"})
    browser = Browser(await make_client(), idp_session)
    response = await sso_sign_in(browser, connection, returnTo="/welcome")
    assert response.status == 302 and response.headers["Location"] == "/welcome"
    me = await browser.me()
    assert me["user"]["email"] == "dana@acme.example.com"
    assert me["account"]["id"] == str(team.account_id)
    assert me["role"] == "admin"  # tenantd-admins -> admin; default would be member
    method = await db.fetch_val(
        "SELECT s.method FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE u.email = 'dana@acme.example.com'"
    )
    assert method == "sso"
    # The state is single use: the same callback again is refused.
    assert idp.hits["token"] == 1


async def test_oidc_connection_refuses_an_address_outside_its_domains(
    team: Team, idp: FakeIdP, make_client: Any, idp_session: aiohttp.ClientSession
) -> None:
    idp.user = FakeUser(sub="x", email="eve@elsewhere.example.com")
    connection = await add_oidc(team, idp)
    browser = Browser(await make_client(), idp_session)
    assert login_error(await sso_sign_in(browser, connection))["error"] == "sso_domain_mismatch"


async def test_enforcement_refuses_social_sign_in(
    team: Team, idp: FakeIdP, make_client: Any, idp_session: aiohttp.ClientSession
) -> None:
    """The configured social provider `fake` (the OAuth tests' one) vouches for a member's
    address; with an enforced connection its callback goes to /login?error=sso_required."""
    idp.user = FakeUser(sub="social-1", email=team.member.email)
    connection = await add_oidc(team, idp, enforce=True)
    browser = Browser(await make_client(), idp_session)
    refused = login_error(await browser.sign_in())
    assert refused == {"error": "sso_required", "connection": connection["id"]}
    # Through the connection itself the same member signs in.
    assert (await sso_sign_in(browser, connection)).headers["Location"] == "/"
    assert (await browser.me())["user"]["id"] == str(team.member.id)


async def test_a_provider_without_email_verified_signs_in_but_false_is_refused(
    team: Team, idp: FakeIdP, make_client: Any, idp_session: aiohttp.ClientSession
) -> None:
    """Entra ID's ID tokens carry no `email_verified`: the connection's provider is the
    authority for its domains. An explicit false is still refused."""
    connection = await add_oidc(team, idp)
    idp.user = FakeUser(sub="entra-1", email="fay@acme.example.com", email_verified=None)
    browser = Browser(await make_client(), idp_session)
    assert (await sso_sign_in(browser, connection)).headers["Location"] == "/"
    idp.user = FakeUser(sub="entra-2", email="gus@acme.example.com", email_verified=False)
    other = Browser(await make_client(), idp_session)
    assert login_error(await sso_sign_in(other, connection))["error"] == "email_not_verified"
