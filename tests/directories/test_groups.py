"""SCIM Groups: members, the PATCH forms Entra ID and Okta send, filters, and group-to-role
mapping (members of a group mapped to `admin` are admins; leaving it makes them members)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.directories.conftest import Directory, scim_json, scim_user
from tests.helpers import data, error

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"


def patch(*operations: dict[str, Any]) -> dict[str, Any]:
    return {"schemas": [PATCH], "Operations": list(operations)}


async def user(directory: Directory, email: str) -> str:
    body = await scim_json(
        await directory.scim.post(f"{directory.base}/Users", json=scim_user(email)), 201
    )
    scim_id: str = body["id"]
    return scim_id


async def group(directory: Directory, name: str, members: list[str]) -> dict[str, Any]:
    body = {"schemas": [GROUP], "displayName": name, "members": [{"value": m} for m in members]}
    created: dict[str, Any] = await scim_json(
        await directory.scim.post(f"{directory.base}/Groups", json=body), 201
    )
    return created


async def roles(db: Any, account_id: uuid.UUID) -> dict[str, str]:
    rows = await db.fetch_all(
        "SELECT u.email, m.role FROM memberships m JOIN users u ON u.id = m.user_id"
        " WHERE m.account_id = %(a)s AND m.revoked_at IS NULL",
        {"a": account_id},
    )
    return {row["email"]: row["role"] for row in rows}


async def map_role(directory: Directory, group_id: str, role: str | None, status: int = 200) -> Any:
    team = directory.team
    url = f"/api/v1/accounts/{team.account_id}/directories/{directory.id}/groups/{group_id}/role"
    response = await team.admin_client.put(url, json={"role": role})
    if status != 200:
        return await error(response, status)
    return await data(response)


async def test_members_and_user_groups(directory: Directory) -> None:
    ada = await user(directory, "ada@example.com")
    bob = await user(directory, "bob@example.com")
    created = await group(directory, "Engineering", [ada, bob])
    assert {m["value"] for m in created["members"]} == {ada, bob}
    assert created["members"][0]["$ref"].endswith(f"/Users/{created['members'][0]['value']}")
    got = await scim_json(await directory.scim.get(f"{directory.base}/Users/{ada}"))
    assert got["groups"] == [
        {
            "value": created["id"],
            "$ref": got["groups"][0]["$ref"],
            "display": "Engineering",
            "type": "direct",
        }
    ]
    unknown = {"schemas": [GROUP], "displayName": "x", "members": [{"value": str(uuid.uuid4())}]}
    body = await scim_json(await directory.scim.post(f"{directory.base}/Groups", json=unknown), 400)
    assert body["scimType"] == "invalidValue"


async def test_group_mapped_to_admin_gives_its_members_the_role(
    directory: Directory, db: Any
) -> None:
    account = directory.team.account_id
    ada = await user(directory, "ada@example.com")
    bob = await user(directory, "bob@example.com")
    admins = await group(directory, "Tenantd Admins", [ada])
    mapped = await map_role(directory, admins["id"], "admin")
    assert mapped["role"] == "admin"
    assert (await roles(db, account))["ada@example.com"] == "admin"

    # Okta adds a member with a value list, no filter.
    url = f"{directory.base}/Groups/{admins['id']}"
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "add", "path": "members", "value": [{"value": bob}]})
        )
    )
    assert (await roles(db, account))["bob@example.com"] == "admin"

    # Entra removes by a filtered path, capitalised.
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "Remove", "path": f'members[value eq "{ada}"]'})
        )
    )
    assert (await roles(db, account))["ada@example.com"] == "member"

    # Entra also removes with a value naming the members (no filter in the path).
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "Remove", "path": "members", "value": [{"value": bob}]})
        )
    )
    assert (await roles(db, account))["bob@example.com"] == "member"
    got = await scim_json(await directory.scim.get(url))
    assert "members" not in got

    # Unmapping and deleting a mapped group both put members back to `member`.
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "add", "path": "members", "value": [{"value": ada}]})
        )
    )
    assert (await roles(db, account))["ada@example.com"] == "admin"
    await map_role(directory, admins["id"], None)
    assert (await roles(db, account))["ada@example.com"] == "member"
    await map_role(directory, admins["id"], "admin")
    assert (await roles(db, account))["ada@example.com"] == "admin"
    assert (await directory.scim.delete(url)).status == 204
    assert (await roles(db, account))["ada@example.com"] == "member"


async def test_mapping_refuses_the_owner_role_and_members_cannot_map(
    directory: Directory,
) -> None:
    created = await group(directory, "Owners", [])
    await map_role(directory, created["id"], "owner", 422)
    team = directory.team
    url = (
        f"/api/v1/accounts/{team.account_id}/directories/{directory.id}/groups/{created['id']}/role"
    )
    await error(await team.member_client.put(url, json={"role": "admin"}), 403)
    listed = await data(
        await team.owner_client.get(
            f"/api/v1/accounts/{team.account_id}/directories/{directory.id}/groups"
        )
    )
    assert [(g["displayName"], g["role"]) for g in listed] == [("Owners", None)]


async def test_entra_replaces_display_name_and_filters(directory: Directory) -> None:
    created = await group(directory, "Sales", [])
    url = f"{directory.base}/Groups/{created['id']}"
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "Replace", "path": "displayName", "value": "Sales EMEA"})
        )
    )
    await group(directory, "Support", [])
    listed = await scim_json(
        await directory.scim.get(
            f"{directory.base}/Groups", params={"filter": 'displayName eq "sales emea"'}
        )
    )
    assert [g["displayName"] for g in listed["Resources"]] == ["Sales EMEA"]
    listed = await scim_json(
        await directory.scim.get(
            f"{directory.base}/Groups",
            params={"filter": 'displayName eq "Support"', "excludedAttributes": "members"},
        )
    )
    assert listed["totalResults"] == 1


async def test_deactivated_members_keep_no_role(directory: Directory, db: Any) -> None:
    account = directory.team.account_id
    ada = await user(directory, "ada@example.com")
    admins = await group(directory, "Admins", [ada])
    await map_role(directory, admins["id"], "admin")
    await scim_json(
        await directory.scim.patch(
            f"{directory.base}/Users/{ada}",
            json=patch({"op": "replace", "path": "active", "value": False}),
        )
    )
    assert "ada@example.com" not in await roles(db, account)
    await scim_json(
        await directory.scim.patch(
            f"{directory.base}/Users/{ada}",
            json=patch({"op": "replace", "path": "active", "value": True}),
        )
    )
    assert (await roles(db, account))["ada@example.com"] == "admin"


async def test_okta_renames_a_group_with_its_id_in_the_value(directory: Directory) -> None:
    created = await group(directory, "Test SCIMv2", [])
    url = f"{directory.base}/Groups/{created['id']}"
    renamed = await scim_json(
        await directory.scim.patch(
            url,
            json=patch({"op": "replace", "value": {"id": created["id"], "displayName": "Renamed"}}),
        )
    )
    assert renamed["displayName"] == "Renamed" and renamed["id"] == created["id"]


async def test_a_group_maps_to_a_custom_role(directory: Directory, db: Any) -> None:
    team = directory.team
    body = {"key": "auditor", "name": "Auditor", "permissions": ["audit:read"]}
    await data(
        await team.owner_client.post(f"/api/v1/accounts/{team.account_id}/roles", json=body), 201
    )
    ada = await user(directory, "ada@example.com")
    auditors = await group(directory, "Auditors", [ada])
    await map_role(directory, auditors["id"], "ghost", 422)
    mapped = await map_role(directory, auditors["id"], "auditor")
    assert mapped["role"] == "auditor"
    assert (await roles(db, team.account_id))["ada@example.com"] == "auditor"


async def test_a_deleted_custom_role_a_group_maps_to_gives_member(
    directory: Directory, db: Any
) -> None:
    team = directory.team
    roles_url = f"/api/v1/accounts/{team.account_id}/roles"
    body = {"key": "gone", "name": "Gone", "permissions": ["audit:read"]}
    await data(await team.owner_client.post(roles_url, json=body), 201)
    empty = await group(directory, "Ghosts", [])
    await map_role(directory, empty["id"], "gone")
    assert (await team.owner_client.delete(f"{roles_url}/gone")).status == 200  # unused
    ada = await user(directory, "ada@example.com")
    await scim_json(
        await directory.scim.patch(
            f"{directory.base}/Groups/{empty['id']}",
            json=patch({"op": "add", "path": "members", "value": [{"value": ada}]}),
        )
    )
    assert (await roles(db, team.account_id))["ada@example.com"] == "member"
