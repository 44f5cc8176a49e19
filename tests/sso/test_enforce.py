"""`enforce: true`: password, email-code and passkey-less sign-ins of the users a connection
binds answer 403 SSO_REQUIRED, their sessions of other kinds end when it is switched on, and
SSO sessions (and users the account has no hold on) are untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.identity import queries
from tenantd.identity.passwords import hash_password
from tests.accounts.helpers import Team
from tests.auth.test_email_code import VERIFY, ask, last_mail
from tests.factories import DEFAULT_PASSWORD, Factory
from tests.helpers import data, error, eventually
from tests.sso.helpers import add_saml, answer, landed, start
from tests.sso.saml_idp import SamlIdp

LOGIN = "/api/v1/auth/login"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["MAGIC_LINK_ENABLED"] = "true"
    return env


async def password_login(client: Any, email: str) -> Any:
    return await client.post(LOGIN, json={"email": email, "password": DEFAULT_PASSWORD})


async def me_status(client: Any) -> int:
    response = await client.get("/api/v1/users/me")
    return int(response.status)


async def test_enforcement_refuses_other_sign_ins_and_ends_other_sessions(
    team: Team,
    saml_idp: SamlIdp,
    factory: Factory,
    make_client: Any,
    mail_dir: Path,
    login: Any,
) -> None:
    pat = await factory.user(email="pat@acme.example.com", account=False)
    await factory.member(team.account_id, pat.id)
    outsider = await factory.user(
        email="bob@acme.example.com"
    )  # no member: the account has no hold
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)

    # Before enforcement: a password session for Pat, an SSO session for Alice.
    pat_browser = await make_client()
    await data(await password_login(pat_browser, pat.email))
    sso_browser = await make_client(origin=None)
    flow = await start(sso_browser, saml_idp, connection)
    assert landed(await flow.post(answer(saml_idp, flow, "alice@acme.example.com"))) == "/"
    assert await me_status(pat_browser) == 200

    path = f"/api/v1/accounts/{team.account_id}/sso-connections/{connection['id']}"
    changed = await data(await team.owner_client.patch(path, json={"enforce": True}))
    assert changed["enforce"] is True

    # Pat's password session ended (the access token too, on every instance); Alice's stays.
    await eventually(lambda: _ended(pat_browser))
    refreshed = await pat_browser.post("/api/v1/auth/refresh")
    assert refreshed.status == 401
    body = await (await sso_browser.get("/api/v1/users/me")).json()
    assert body["user"]["email"] == "alice@acme.example.com"

    # Every other way in for Pat: 403 SSO_REQUIRED, naming where SSO starts.
    refused = await error(await password_login(await make_client(), pat.email), 403, "SSO_REQUIRED")
    assert refused["details"]["connectionId"] == connection["id"]
    assert refused["details"]["startUrl"] == f"/sso/start?connection={connection['id']}"
    code_browser = await make_client()
    await ask(code_browser, pat.email)
    code, _ = last_mail(mail_dir, pat.email)
    await error(
        await code_browser.post(VERIFY, json={"email": pat.email, "code": code}),
        403,
        "SSO_REQUIRED",
    )
    # The owner too is bound (a member), so the rule has no side door.
    owner_login = await make_client()
    await factory_password(factory, team.owner.id)
    await error(await password_login(owner_login, team.owner.email), 403, "SSO_REQUIRED")

    # A user of the domain whom the account has no hold on signs in as before.
    await data(await password_login(await make_client(), outsider.email))

    # The owner's own password session ended with the others: a fresh session turns it off,
    # and the password works again.
    assert await me_status(team.owner_client) == 401
    owner_again = await login(team.owner)
    await data(await owner_again.patch(path, json={"enforce": False}))
    await data(await password_login(await make_client(), pat.email))


async def _ended(browser: Any) -> bool:
    return await me_status(browser) == 401


async def factory_password(factory: Factory, user_id: Any) -> None:
    async with factory.db.connection() as conn:
        await queries.set_password(
            conn, user_id=user_id, password_hash=await hash_password(DEFAULT_PASSWORD)
        )


async def test_a_claimed_domain_binds_every_address_of_it(
    team: Team, saml_idp: SamlIdp, factory: Factory, make_client: Any, db: Any
) -> None:
    """With the domain claimed by the account, enforcement binds non-members too (they would
    have to join it through SSO anyway)."""
    await db.execute(
        "UPDATE accounts SET claimed_domain = 'acme.example.com' WHERE id = %(a)s",
        {"a": team.account_id},
    )
    outsider = await factory.user(email="bob@acme.example.com", account=False)
    await add_saml(team.owner_client, team.account_id, saml_idp, enforce=True)
    await error(await password_login(await make_client(), outsider.email), 403, "SSO_REQUIRED")


async def test_creating_an_enforced_connection_ends_other_sessions(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    assert await me_status(team.member_client) == 200
    await add_saml(team.owner_client, team.account_id, saml_idp, enforce=True)
    await eventually(lambda: _ended(team.member_client))
