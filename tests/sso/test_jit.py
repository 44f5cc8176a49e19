"""Just-in-time membership: within the seat cap (read under the account lock, so racing
sign-ins never exceed it), with the connection's default role."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.accounts.helpers import Team
from tests.factories import Factory
from tests.sso.helpers import add_saml, answer, landed, refusal, start
from tests.sso.saml_idp import SamlIdp


async def members(db: Any, team: Team) -> int:
    count: int = await db.fetch_val(
        "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
        {"a": team.account_id},
    )
    return count


async def test_no_free_seat_refuses_the_sign_in_and_writes_nothing(
    team: Team, saml_idp: SamlIdp, factory: Factory, make_client: Any, db: Any
) -> None:
    await factory.set_plan(team.account_id, "team", seats=3)  # owner, admin, member
    connection = await add_saml(team.owner_client, team.account_id, saml_idp, defaultRole="admin")
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    assert refusal(await flow.post(answer(saml_idp, flow, "new@acme.example.com"))) == (
        "seat_limit_reached"
    )
    assert (
        await db.fetch_val("SELECT count(*) FROM users WHERE email = 'new@acme.example.com'") == 0
    )
    await factory.set_plan(team.account_id, "team", seats=4)
    flow = await start(browser, saml_idp, connection)
    assert landed(await flow.post(answer(saml_idp, flow, "new@acme.example.com"))) == "/"
    body = await (await browser.get("/api/v1/users/me")).json()
    assert body["role"] == "admin"  # the connection's defaultRole
    assert await members(db, team) == 4


async def test_racing_sign_ins_never_exceed_the_seat_cap(
    team: Team, saml_idp: SamlIdp, factory: Factory, make_client: Any, db: Any
) -> None:
    await factory.set_plan(team.account_id, "team", seats=5)  # two seats free
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    flows = []
    for i in range(5):
        flow = await start(await make_client(origin=None), saml_idp, connection)
        flows.append((flow, answer(saml_idp, flow, f"racer{i}@acme.example.com")))
    answers = await asyncio.gather(*(flow.post(response) for flow, response in flows))
    outcomes = sorted("in" if a.headers["Location"] == "/" else refusal(a) for a in answers)
    assert outcomes == [
        "in",
        "in",
        "seat_limit_reached",
        "seat_limit_reached",
        "seat_limit_reached",
    ]
    assert await members(db, team) == 5


async def test_groups_map_to_a_custom_role(team: Team, saml_idp: SamlIdp, make_client: Any) -> None:
    roles_url = f"/api/v1/accounts/{team.account_id}/roles"
    body = {"key": "auditor", "name": "Auditor", "permissions": ["audit:read"]}
    assert (await team.owner_client.post(roles_url, json=body)).status == 201
    connection = await add_saml(
        team.owner_client, team.account_id, saml_idp, groupRoles={"Audit": "auditor"}
    )
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    response = answer(saml_idp, flow, "aud@acme.example.com", attributes={"groups": ["Audit"]})
    assert landed(await flow.post(response)) == "/"
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["role"] == "auditor" and "audit:read" in me["permissions"]
