"""Custom roles (issue 30 part 3): the roles API, assignment, /me, the cache, audit and events."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tenantd.identity import permissions
from tests.accounts.helpers import Login, Team, audit_actions
from tests.factories import Factory
from tests.helpers import data, error


def roles_url(team: Team, key: str | None = None) -> str:
    base = f"/api/v1/accounts/{team.account_id}/roles"
    return base if key is None else f"{base}/{key}"


async def create(team: Team, key: str, grants: list[str], name: str | None = None) -> Any:
    body = {"key": key, "name": name or key.title(), "permissions": grants}
    return await data(await team.owner_client.post(roles_url(team), json=body), 201)


async def holder(team: Team, factory: Factory, login: Login, key: str) -> tuple[uuid.UUID, Any]:
    """A new member of the team's account with role `key`, signed in there."""
    user = await factory.user(password=None)
    await factory.member(team.account_id, user.id, key)
    return user.id, await login(user, team.account_id)


async def me(client: Any) -> dict[str, Any]:
    response = await client.get("/api/v1/users/me")
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


async def test_the_system_roles_are_listed_first_and_are_fixed(team: Team) -> None:
    await create(team, "auditor", ["audit:read"])
    listed = await data(await team.member_client.get(roles_url(team)))
    assert [r["key"] for r in listed] == ["owner", "admin", "member", "auditor"]
    assert listed[0]["permissions"] == ["*"] and listed[0]["system"] is True
    assert set(listed[1]["permissions"]) == set(permissions.SYSTEM_ROLES["admin"])
    assert listed[2]["permissions"] == ["account:read", "members:read"]
    assert listed[3] == {
        **listed[3],
        "key": "auditor",
        "name": "Auditor",
        "permissions": ["audit:read"],
        "system": False,
    }
    for key in ("owner", "admin", "member"):
        await error(
            await team.owner_client.patch(roles_url(team, key), json={"name": "x"}),
            409,
            "SYSTEM_ROLE",
        )
        await error(await team.owner_client.delete(roles_url(team, key)), 409, "SYSTEM_ROLE")
    body = {"key": "admin", "name": "Admin", "permissions": []}
    await error(await team.owner_client.post(roles_url(team), json=body), 409, "SYSTEM_ROLE")


async def test_permissions_are_checked_with_a_field_error_each(team: Team) -> None:
    body = {
        "key": "bad",
        "name": "Bad",
        "permissions": ["reports:read", "Billing:Read", "members:invit", "ownership:transfer"],
    }
    found = await error(await team.owner_client.post(roles_url(team), json=body), 422)
    fields = found["details"]["fields"]
    assert set(fields) == {"permissions.1", "permissions.2", "permissions.3"}
    assert fields["permissions.1"].startswith("invalid_permission")
    assert fields["permissions.2"].startswith("unknown_permission")
    assert fields["permissions.3"].startswith("owner_only")
    bad_key = {"key": "Has Space", "name": "x", "permissions": []}
    await error(await team.owner_client.post(roles_url(team), json=bad_key), 422)
    await create(team, "dup", [])
    dup = {"key": "dup", "name": "Again", "permissions": []}
    await error(await team.owner_client.post(roles_url(team), json=dup), 409, "ROLE_EXISTS")


async def test_members_may_not_manage_roles_admins_may(team: Team) -> None:
    body = {"key": "viewer", "name": "Viewer", "permissions": ["members:read"]}
    await error(await team.member_client.post(roles_url(team), json=body), 403, "FORBIDDEN")
    created = await data(await team.admin_client.post(roles_url(team), json=body), 201)
    assert created["key"] == "viewer"
    changed = await data(
        await team.admin_client.patch(roles_url(team, "viewer"), json={"name": "Reader"})
    )
    assert changed["name"] == "Reader" and changed["permissions"] == ["members:read"]
    # A key never changes (the same key may be sent back as is).
    renamed = {"key": "reader", "name": "Reader"}
    found = await error(await team.admin_client.patch(roles_url(team, "viewer"), json=renamed), 422)
    assert "key_immutable" in str(found)
    same = {"key": "viewer", "name": "Viewer"}
    assert (await data(await team.admin_client.patch(roles_url(team, "viewer"), json=same)))[
        "name"
    ] == "Viewer"
    await data(await team.admin_client.delete(roles_url(team, "viewer")))
    await error(await team.admin_client.delete(roles_url(team, "viewer")), 404, "NOT_FOUND")


async def test_a_custom_role_is_assigned_and_enforced_at_once(
    team: Team, factory: Factory, login: Login
) -> None:
    """The role's permissions hold from the next request on, in the guard and in /me: a role
    edit reaches cached principals and /me bodies."""
    await create(team, "auditor", ["audit:read", "members:read"])
    user = await factory.user(password=None)
    await factory.member(team.account_id, user.id, "member")
    client = await login(user, team.account_id)
    audit = f"/api/v1/accounts/{team.account_id}/audit-log"
    await error(await client.get(audit), 403, "FORBIDDEN")
    assert (await me(client))["permissions"] == ["account:read", "members:read"]
    changed = await data(
        await team.owner_client.patch(
            f"/api/v1/accounts/{team.account_id}/members/{user.id}", json={"role": "auditor"}
        )
    )
    assert changed["role"] == "auditor"
    body = await me(client)
    assert body["role"] == "auditor"
    assert body["permissions"] == ["audit:read", "members:read"]
    assert body["capabilities"]["canManageMembers"] is False
    assert body["capabilities"]["canLeaveAccount"] is True
    await data(await client.get(audit))
    await error(await client.get(f"/api/v1/accounts/{team.account_id}"), 403, "FORBIDDEN")
    # Taking the permission away: refused on the very next request, /me says so.
    await data(
        await team.owner_client.patch(
            roles_url(team, "auditor"), json={"permissions": ["members:read", "account:read"]}
        )
    )
    await error(await client.get(audit), 403, "FORBIDDEN")
    assert (await me(client))["permissions"] == ["account:read", "members:read"]
    await data(await client.get(f"/api/v1/accounts/{team.account_id}"))


async def test_wildcards_match_and_app_permissions_are_listed(
    team: Team, factory: Factory, login: Login
) -> None:
    await create(team, "billing", ["billing:*", "members:*"])
    _, client = await holder(team, factory, login, "billing")
    body = await me(client)
    assert body["permissions"] == ["billing:*", "members:*"]
    await data(await client.get(f"/api/v1/accounts/{team.account_id}/members"))
    await data(await client.get(f"/api/v1/accounts/{team.account_id}/invitations"))
    assert permissions.allowed("billing", ("billing:*",), "billing:refund")
    assert not permissions.allowed("billing", ("billing:*",), "billingx:refund")
    assert not permissions.allowed("billing", ("*",), "ownership:transfer")
    assert permissions.allowed("owner", None, "reports:export")
    assert not permissions.allowed("admin", None, "reports:export")


async def test_the_owner_stays_single_and_changes_only_by_transfer(
    team: Team, factory: Factory, login: Login
) -> None:
    await create(team, "everything", ["*"])
    url = f"/api/v1/accounts/{team.account_id}/members/{team.member.id}"
    found = await error(await team.owner_client.patch(url, json={"role": "owner"}), 422)
    assert found["details"]["fields"]["role"].startswith("owner_by_transfer")
    found = await error(await team.owner_client.patch(url, json={"role": "nosuch"}), 422)
    assert found["details"]["fields"]["role"].startswith("unknown_role")
    await data(await team.owner_client.patch(url, json={"role": "everything"}))
    # `*` in a custom role never reaches the owner's own permissions.
    await error(
        await team.member_client.post(
            f"/api/v1/accounts/{team.account_id}/transfer-ownership",
            json={"userId": str(team.admin.id)},
        ),
        403,
        "FORBIDDEN",
    )
    await error(
        await team.member_client.patch(
            f"/api/v1/accounts/{team.account_id}/members/{team.admin.id}",
            json={"role": "owner"},
        ),
        422,
    )
    await error(await team.member_client.delete(f"/api/v1/accounts/{team.account_id}"), 403)
    owners = await team.owner_client.get(f"/api/v1/accounts/{team.account_id}/members")
    assert [m["role"] for m in await data(owners)].count("owner") == 1


async def test_a_custom_role_hands_out_no_more_than_it_holds(
    team: Team, factory: Factory, login: Login
) -> None:
    await create(team, "lead", ["members:read", "account:read", "members:change_role"])
    await create(team, "reader", ["members:read"])
    _, lead = await holder(team, factory, login, "lead")
    url = f"/api/v1/accounts/{team.account_id}/members/{team.member.id}"
    await error(await lead.patch(url, json={"role": "admin"}), 403, "FORBIDDEN")
    assert (await data(await lead.patch(url, json={"role": "reader"})))["role"] == "reader"
    admin_url = f"/api/v1/accounts/{team.account_id}/members/{team.admin.id}"
    await error(await lead.patch(admin_url, json={"role": "member"}), 403, "FORBIDDEN")
    body = {"key": "wider", "name": "Wider", "permissions": ["audit:read"]}
    await error(await lead.post(roles_url(team), json=body), 403, "FORBIDDEN")


async def test_a_role_in_use_is_not_deleted(team: Team, factory: Factory, login: Login) -> None:
    await create(team, "support", ["members:read"])
    user_id, _ = await holder(team, factory, login, "support")
    found = await error(await team.owner_client.delete(roles_url(team, "support")), 409)
    assert found["code"] == "ROLE_IN_USE"
    assert found["details"] == {"members": 1, "invitations": 0}
    member_url = f"/api/v1/accounts/{team.account_id}/members/{user_id}"
    await data(await team.owner_client.patch(member_url, json={"role": "member"}))
    await data(await team.owner_client.delete(roles_url(team, "support")))


async def test_invitations_carry_a_custom_role_into_the_membership(
    make_team: Any, factory: Factory, login: Login, db: Any
) -> None:
    team = await make_team(plan="business")
    await create(team, "support", ["members:read"])
    issued = await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": "sam@support.example", "role": "support"},
        ),
        201,
    )
    assert issued["invitation"]["role"] == "support"
    found = await error(await team.owner_client.delete(roles_url(team, "support")), 409)
    assert found["details"] == {"members": 0, "invitations": 1}
    sam = await factory.user(email="sam@support.example", password=None, account=False)
    client = await login(sam)
    accepted = await data(
        await client.post("/api/v1/invitations/accept", json={"token": issued["token"]})
    )
    assert accepted["membership"]["role"] == "support"
    assert (await me(client))["permissions"] == ["members:read"]


async def test_role_changes_write_audit_entries_and_events(team: Team, db: Any) -> None:
    await create(team, "auditor", ["audit:read"])
    await data(
        await team.owner_client.patch(
            roles_url(team, "auditor"), json={"permissions": ["audit:read", "members:read"]}
        )
    )
    await data(await team.owner_client.delete(roles_url(team, "auditor")))
    actions = await audit_actions(db, team.account_id)
    assert [a for a in actions if a.startswith("role.")] == [
        "role.created",
        "role.updated",
        "role.deleted",
    ]
    events = await db.fetch_all(
        "SELECT type, data, previous FROM outbox_events WHERE account_id = %(a)s"
        " AND type LIKE 'role.%%'"
        " ORDER BY id",
        {"a": team.account_id},
    )
    assert [e["type"] for e in events] == ["role.created", "role.updated", "role.deleted"]
    assert events[0]["data"]["key"] == "auditor"
    assert events[0]["data"]["permissions"] == ["audit:read"]
    assert events[1]["previous"] == {"permissions": ["audit:read"]}


@pytest.mark.parametrize(
    ("declared", "wanted", "field"),
    [
        (("reports:read",), ["reports:read", "reports:write"], "permissions.1"),
        ((), ["reports:read", "reports:write"], None),
        (("reports:read",), ["reports:*"], None),
        ((), ["reports:read\n"], "permissions.0"),
        ((), ["*", "m*", "members:*"], None),
    ],
)
def test_declared_app_permissions_catch_typos(
    declared: tuple[str, ...], wanted: list[str], field: str | None
) -> None:
    found = permissions.problems(wanted, declared)
    assert list(found) == ([field] if field else [])


async def test_the_database_keeps_roles_of_their_account_and_purges_them_with_it(
    team: Team, factory: Factory, db: Any
) -> None:
    """The backstop under the service's checks: a membership names a role of its own account,
    a role in use is not deleted, and purging the account takes its roles along."""
    await create(team, "support", ["members:read"])
    other = await factory.user(password=None)
    assert other.account_id is not None
    with pytest.raises(Exception, match="not a role of account"):
        await db.execute(
            "UPDATE memberships SET role = 'support' WHERE account_id = %(a)s",
            {"a": other.account_id},
        )
    await factory.member(team.account_id, other.id, "support")
    with pytest.raises(Exception, match="in use"):
        await db.execute(
            "DELETE FROM account_roles WHERE account_id = %(a)s", {"a": team.account_id}
        )
    await db.execute("DELETE FROM accounts WHERE id = %(a)s", {"a": team.account_id})
    left = await db.fetch_val(
        "SELECT count(*) FROM account_roles WHERE account_id = %(a)s", {"a": team.account_id}
    )
    assert left == 0
