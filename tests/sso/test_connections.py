"""The account's SSO connections over the API: who may manage them, what they must be, one live
connection per domain (also under concurrency), audit entries and outbox events."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.accounts.helpers import Login, Team, audit_actions
from tests.factories import Factory
from tests.helpers import data, error
from tests.sso.helpers import add_saml
from tests.sso.saml_idp import SamlIdp

OIDC = {
    "type": "oidc",
    "domains": ["acme.example.com"],
    "issuer": "https://login.acme.example.com/",
    "clientId": "tenantd",
    "clientSecret": "s3cret-client-value",
}


def url(team: Team, cid: str | None = None) -> str:
    base = f"/api/v1/accounts/{team.account_id}/sso-connections"
    return f"{base}/{cid}" if cid else base


async def test_admin_adds_lists_changes_and_removes_a_connection(
    team: Team, db: Any, saml_idp: SamlIdp
) -> None:
    created = await data(await team.admin_client.post(url(team), json=OIDC), 201)
    assert created["type"] == "oidc" and created["domains"] == ["acme.example.com"]
    assert created["enforce"] is False and created["defaultRole"] == "member"
    assert created["redirectUri"].endswith(f"/sso/oidc/{created['id']}/callback")
    assert "clientSecret" not in created
    sealed = await db.fetch_val(
        "SELECT client_secret_sealed FROM sso_connections WHERE id = %(id)s", {"id": created["id"]}
    )
    assert b"s3cret-client-value" not in bytes(sealed)
    listed = await data(await team.owner_client.get(url(team)))
    assert [c["id"] for c in listed] == [created["id"]]
    changed = await data(
        await team.admin_client.patch(
            url(team, created["id"]),
            json={"domains": ["acme.example.com", "Acme-Labs.example.com"], "name": "Okta"},
        )
    )
    assert (
        changed["domains"] == ["acme-labs.example.com", "acme.example.com"]
        and changed["name"] == "Okta"
    )
    await data(await team.admin_client.delete(url(team, created["id"])))
    assert await data(await team.owner_client.get(url(team))) == []
    actions = await audit_actions(db, team.account_id)
    assert [a for a in actions if a.startswith("sso_connection.")] == [
        "sso_connection.created",
        "sso_connection.updated",
        "sso_connection.deleted",
    ]
    events = await db.fetch_all(
        "SELECT type, data, previous FROM outbox_events WHERE type LIKE 'sso_connection.%%'"
        " ORDER BY id"
    )
    assert [e["type"] for e in events] == [
        "sso_connection.created",
        "sso_connection.updated",
        "sso_connection.deleted",
    ]
    assert events[1]["previous"]["domains"] == ["acme.example.com"]
    assert all("clientSecret" not in str(e["data"]) for e in events)


async def test_a_member_may_not_manage_connections(team: Team) -> None:
    await error(await team.member_client.get(url(team)), 403, "FORBIDDEN")
    await error(await team.member_client.post(url(team), json=OIDC), 403, "FORBIDDEN")


async def test_validation_errors(team: Team, saml_idp: SamlIdp) -> None:
    client = team.owner_client
    cases: list[tuple[dict[str, Any], str]] = [
        ({**OIDC, "domains": ["gmail.com"]}, "domains"),
        ({**OIDC, "domains": ["not a domain"]}, "domains"),
        ({**OIDC, "domains": []}, "domains"),
        (
            {"type": "oidc", "domains": ["acme.example.com"], "issuer": "https://x.example.com"},
            "clientId",
        ),
        ({**OIDC, "issuer": "ftp://x.example.com"}, "issuer"),
        ({**OIDC, "idpSsoUrl": "https://x.example.com"}, "idpSsoUrl"),
        ({"type": "saml", "domains": ["acme.example.com"], "idpEntityId": "x"}, "idpSsoUrl"),
        (
            {
                "type": "saml",
                "domains": ["acme.example.com"],
                "idpEntityId": "x",
                "idpSsoUrl": "https://idp.test/sso",
                "idpCertificate": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----",
            },
            "idpCertificate",
        ),
        (
            {"type": "saml", "domains": ["acme.example.com"], "idpMetadataXml": "<x/>"},
            "idpMetadataXml",
        ),
        ({**OIDC, "defaultRole": "owner"}, "defaultRole"),
    ]
    for body, field in cases:
        found = await error(await client.post(url(team), json=body), 422, "VALIDATION_ERROR")
        assert field in found["details"]["fields"], (body, found)


async def test_a_domain_belongs_to_one_live_connection(
    team: Team, make_team: Any, saml_idp: SamlIdp
) -> None:
    await data(await team.owner_client.post(url(team), json=OIDC), 201)
    # The same account cannot give it to a second connection either.
    taken = await error(await team.owner_client.post(url(team), json=OIDC), 409, "SSO_DOMAIN_TAKEN")
    assert taken["details"] == {"domain": "acme.example.com", "field": "domains"}
    other = await make_team(domain="other.example.com")
    await error(await other.owner_client.post(url(other), json=OIDC), 409, "SSO_DOMAIN_TAKEN")


async def test_two_accounts_racing_for_a_domain_one_wins(make_team: Any) -> None:
    teams = [await make_team(domain=f"team{i}.example.com") for i in range(4)]
    body = {**OIDC, "domains": ["contested.example.com", "x.example.com"]}
    answers = await asyncio.gather(*(t.owner_client.post(url(t), json=body) for t in teams))
    statuses = sorted(a.status for a in answers)
    assert statuses == [201, 409, 409, 409], statuses
    for answer in answers:
        if answer.status == 409:
            assert (await answer.json())["error"]["code"] == "SSO_DOMAIN_TAKEN"


async def test_a_domain_claimed_by_another_account_cannot_be_taken(
    team: Team, make_team: Any, db: Any
) -> None:
    other = await make_team(domain="other.example.com")
    await db.execute(
        "UPDATE accounts SET claimed_domain = 'claimed.example.com' WHERE id = %(a)s",
        {"a": other.account_id},
    )
    body = {**OIDC, "domains": ["claimed.example.com"]}
    await error(await team.owner_client.post(url(team), json=body), 409, "SSO_DOMAIN_TAKEN")
    await data(await other.owner_client.post(url(other), json=body), 201)


async def test_a_soft_deleted_accounts_connection_releases_its_domains(
    team: Team, make_team: Any, db: Any
) -> None:
    await data(await team.owner_client.post(url(team), json=OIDC), 201)
    await db.execute(
        "UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": team.account_id}
    )
    other = await make_team(domain="other.example.com")
    await data(await other.owner_client.post(url(other), json=OIDC), 201)


async def test_another_accounts_connection_is_not_found(
    team: Team, make_team: Any, saml_idp: SamlIdp, login: Login, factory: Factory
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    other = await make_team(domain="other.example.com")
    path = f"/api/v1/accounts/{other.account_id}/sso-connections/{connection['id']}"
    await error(await other.owner_client.patch(path, json={"enforce": True}), 404)
    await error(await other.owner_client.delete(path), 404)
    # Its own account's URL with another account's token: 403 (not the active account).
    await error(await other.owner_client.get(url(team)), 403)


async def test_roles_are_any_role_of_the_account_but_owner(team: Team) -> None:
    roles_url = f"/api/v1/accounts/{team.account_id}/roles"
    body = {"key": "auditor", "name": "Auditor", "permissions": ["audit:read"]}
    await data(await team.owner_client.post(roles_url, json=body), 201)
    created = await data(
        await team.admin_client.post(
            url(team),
            json={**OIDC, "defaultRole": "auditor", "groupRoles": {"Audit": "auditor"}},
        ),
        201,
    )
    assert created["defaultRole"] == "auditor" and created["groupRoles"] == {"Audit": "auditor"}
    cid = created["id"]
    for change, field in (
        ({"defaultRole": "ghost"}, "defaultRole"),
        ({"defaultRole": "owner"}, "defaultRole"),
        ({"groupRoles": {"Top": "owner"}}, "groupRoles.Top"),
        ({"groupRoles": {"Top": "ghost"}}, "groupRoles.Top"),
    ):
        found = await error(
            await team.admin_client.patch(url(team, cid), json=change), 422, "VALIDATION_ERROR"
        )
        assert field in found["details"]["fields"], (change, found)
    changed = await data(
        await team.admin_client.patch(url(team, cid), json={"groupRoles": {"Ops": "admin"}})
    )
    assert changed["groupRoles"] == {"Ops": "admin"} and changed["defaultRole"] == "auditor"
