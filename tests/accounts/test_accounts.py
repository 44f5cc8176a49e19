"""Accounts: list, create, read, rename, soft delete (Account state table), switch."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from tests.accounts.helpers import Team, audit_actions
from tests.helpers import access_claims, data, error


def cookie(client: Any, name: str) -> str | None:
    for morsel in client.session.cookie_jar:
        if morsel.key == name:
            return str(morsel.value)
    return None


def aid_of(client: Any) -> uuid.UUID | None:
    token = cookie(client, "auth_token")
    assert token is not None
    return access_claims(client, token).account_id


async def test_list_my_accounts_with_role_and_active_flag(team: Team, factory: Any) -> None:
    mine = await data(await team.admin_client.get("/api/v1/accounts"))
    by_id = {item["id"]: item for item in mine}
    assert by_id[str(team.account_id)]["role"] == "admin"
    assert by_id[str(team.account_id)]["active"] is True
    assert by_id[str(team.admin.account_id)]["role"] == "owner"
    assert by_id[str(team.admin.account_id)]["active"] is False
    assert len(mine) == 2


async def test_create_account_makes_caller_owner_on_default_plan(
    team: Team, db: Any, factory: Any
) -> None:
    created = await data(
        await team.member_client.post("/api/v1/accounts", json={"name": "  Side project  "}),
        201,
    )
    assert created["name"] == "Side project"
    assert created["role"] == "owner"
    assert created["active"] is False  # the caller keeps its active account until it switches
    new_id = uuid.UUID(created["id"])
    owners = await db.fetch_all(
        "SELECT user_id FROM memberships WHERE account_id = %(a)s AND role = 'owner'"
        " AND revoked_at IS NULL",
        {"a": new_id},
    )
    assert [row["user_id"] for row in owners] == [team.member.id]
    plan = await db.fetch_val(
        "SELECT plan_code FROM account_plans WHERE account_id = %(a)s", {"a": new_id}
    )
    assert plan == "free"
    assert await audit_actions(db, new_id) == ["account.created", "membership.created"]
    assert aid_of(team.member_client) == team.account_id


async def test_create_account_validates_name(team: Team) -> None:
    await error(
        await team.owner_client.post("/api/v1/accounts", json={"name": "   "}),
        422,
        "VALIDATION_ERROR",
    )
    await error(
        await team.owner_client.post("/api/v1/accounts", json={"name": "x" * 201}),
        422,
        "VALIDATION_ERROR",
    )
    await error(
        await team.owner_client.post("/api/v1/accounts", json={"name": "a", "owner": "x"}),
        422,
        "VALIDATION_ERROR",
    )


class TestDefaultPlan:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["DEFAULT_PLAN"] = "team"
        return env

    async def test_default_plan_setting_applies_to_new_accounts(
        self, factory: Any, login: Any, db: Any
    ) -> None:
        user = await factory.user(password=None)
        client = await login(user)
        created = await data(await client.post("/api/v1/accounts", json={"name": "T"}), 201)
        plan = await db.fetch_val(
            "SELECT plan_code FROM account_plans WHERE account_id = %(a)s", {"a": created["id"]}
        )
        assert plan == "team"


async def test_user_without_account_can_create_one_and_lands_in_it(
    factory: Any, login: Any, db: Any
) -> None:
    user = await factory.user(account=False, password=None)
    client = await login(user)
    assert aid_of(client) is None
    assert await data(await client.get("/api/v1/accounts")) == []
    created = await data(await client.post("/api/v1/accounts", json={"name": "Mine"}), 201)
    assert created["active"] is True
    assert aid_of(client) == uuid.UUID(created["id"])
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == created["id"]
    assert me["role"] == "owner"
    # The refresh session follows: a refresh keeps the new account.
    refreshed = await client.post("/api/v1/auth/refresh")
    assert refreshed.status == 200
    assert aid_of(client) == uuid.UUID(created["id"])


async def test_read_account_shows_plan_seats_and_features(team: Team) -> None:
    detail = await data(await team.member_client.get(f"/api/v1/accounts/{team.account_id}"))
    assert detail["id"] == str(team.account_id)
    assert detail["role"] == "member"
    assert detail["plan"] == "team"
    assert detail["seats"] == 10
    assert detail["seatsUsed"] == 3
    assert detail["features"]["team_invitations"] is True


async def test_rename_by_admin_and_owner_not_member(team: Team, db: Any) -> None:
    url = f"/api/v1/accounts/{team.account_id}"
    await error(await team.member_client.patch(url, json={"name": "No"}), 403, "FORBIDDEN")
    renamed = await data(await team.admin_client.patch(url, json={"name": "Acme"}))
    assert renamed["name"] == "Acme"
    renamed = await data(await team.owner_client.patch(url, json={"name": "Acme Inc"}))
    assert renamed["name"] == "Acme Inc"
    rows = await db.fetch_all(
        "SELECT actor_user_id, data FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'account.renamed' ORDER BY id",
        {"a": team.account_id},
    )
    assert [(r["actor_user_id"], r["data"]["to"]) for r in rows] == [
        (team.admin.id, "Acme"),
        (team.owner.id, "Acme Inc"),
    ]


# -- soft delete (Account: active -> soft-deleted) ---------------------------------------------


async def test_only_the_owner_deletes(team: Team) -> None:
    url = f"/api/v1/accounts/{team.account_id}"
    await error(await team.admin_client.delete(url), 403, "FORBIDDEN")
    await error(await team.member_client.delete(url), 403, "FORBIDDEN")


async def test_soft_delete_answer_and_effects(
    team: Team, db: Any, login: Any, factory: Any
) -> None:
    url = f"/api/v1/accounts/{team.account_id}"
    other_member_refresh = await factory.cookies(team.member, team.account_id)
    before = dt.datetime.now(dt.UTC)
    body = await data(await team.owner_client.delete(url))
    account = body["account"]
    assert account["id"] == str(team.account_id)
    deleted_at = dt.datetime.fromisoformat(account["deletedAt"])
    purge_after = dt.datetime.fromisoformat(account["purgeAfter"])
    assert before - dt.timedelta(seconds=5) <= deleted_at <= dt.datetime.now(dt.UTC)
    assert purge_after - deleted_at == dt.timedelta(days=30)
    row = await db.fetch_one(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": team.account_id}
    )
    assert row["deleted_at"] is not None
    # Memberships are kept (the hard delete removes them later).
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
            {"a": team.account_id},
        )
        == 3
    )
    assert "account.soft_deleted" in await audit_actions(db, team.account_id)

    # The owner's session moved to its next account (none left here: aid null).
    assert aid_of(team.owner_client) is None
    me = await (await team.owner_client.get("/api/v1/users/me")).json()
    assert me["account"] is None
    assert me["memberships"] == []
    assert await data(await team.owner_client.get("/api/v1/accounts")) == []

    # Other members: their tokens for the deleted account are refused by the guard...
    await error(await team.member_client.get(url), 401, "UNAUTHORIZED")
    # ...refresh no longer renews a session bound to it...
    fresh = await login(team.member, team.account_id)
    fresh.session.cookie_jar.clear()
    fresh.session.cookie_jar.update_cookies(
        {"refresh_token": other_member_refresh["refresh_token"]}
    )
    await error(await fresh.post("/api/v1/auth/refresh"), 401)
    # ...and their listings no longer offer it.
    elsewhere = await login(team.member)
    listed = await data(await elsewhere.get("/api/v1/accounts"))
    assert str(team.account_id) not in {item["id"] for item in listed}
    me = await (await elsewhere.get("/api/v1/users/me")).json()
    assert str(team.account_id) not in {m["accountId"] for m in me["memberships"]}
    # Requests naming it from another session: 404.
    await error(await elsewhere.get(url), 404, "NOT_FOUND")
    await error(await elsewhere.get(url + "/members"), 404, "NOT_FOUND")
    # Switching to it: 404.
    await error(
        await elsewhere.post("/api/v1/accounts/switch", json={"accountId": str(team.account_id)}),
        404,
        "NOT_FOUND",
    )


async def test_delete_moves_the_owner_to_another_account(factory: Any, login: Any, db: Any) -> None:
    owner = await factory.user(password=None)
    client = await login(owner)
    second = await data(await client.post("/api/v1/accounts", json={"name": "Second"}), 201)
    await data(await client.delete(f"/api/v1/accounts/{owner.account_id}"))
    assert aid_of(client) == uuid.UUID(second["id"])
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == second["id"]
    refreshed = await client.post("/api/v1/auth/refresh")
    assert refreshed.status == 200
    assert aid_of(client) == uuid.UUID(second["id"])


async def test_deleting_twice_is_not_found(factory: Any, login: Any) -> None:
    owner = await factory.user(password=None)
    client = await login(owner)
    keep = await login(owner)  # a second browser with a token for the same account
    await data(await client.delete(f"/api/v1/accounts/{owner.account_id}"))
    # The other browser's token names a deleted account: the guard refuses it.
    await error(await keep.delete(f"/api/v1/accounts/{owner.account_id}"), 401)


# -- switch -------------------------------------------------------------------------------------


async def test_switch_issues_token_with_new_aid_and_old_token_keeps_old_account(
    team: Team, make_client: Any, db: Any
) -> None:
    old_token = cookie(team.admin_client, "auth_token")
    switched = await data(
        await team.admin_client.post(
            "/api/v1/accounts/switch", json={"accountId": str(team.admin.account_id)}
        )
    )
    assert switched["account"]["id"] == str(team.admin.account_id)
    assert switched["role"] == "owner"
    assert aid_of(team.admin_client) == team.admin.account_id
    me = await (await team.admin_client.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == str(team.admin.account_id)
    assert me["role"] == "owner"
    # The old token still works against its old account until it expires.
    old = await make_client(cookies={"auth_token": old_token})
    me_old = await (await old.get("/api/v1/users/me")).json()
    assert me_old["account"]["id"] == str(team.account_id)
    assert me_old["role"] == "admin"
    await data(await old.get(f"/api/v1/accounts/{team.account_id}/members"))
    # The refresh session follows the switch.
    assert (await team.admin_client.post("/api/v1/auth/refresh")).status == 200
    assert aid_of(team.admin_client) == team.admin.account_id


async def test_switch_refuses_non_member_unknown_and_malformed(team: Team, factory: Any) -> None:
    stranger = await factory.user(password=None)
    await error(
        await team.member_client.post(
            "/api/v1/accounts/switch", json={"accountId": str(stranger.account_id)}
        ),
        403,
        "FORBIDDEN",
    )
    await error(
        await team.member_client.post(
            "/api/v1/accounts/switch", json={"accountId": str(uuid.uuid4())}
        ),
        404,
        "NOT_FOUND",
    )
    await error(
        await team.member_client.post("/api/v1/accounts/switch", json={"accountId": "nope"}),
        422,
        "VALIDATION_ERROR",
    )
    assert aid_of(team.member_client) == team.account_id


async def test_switch_refuses_revoked_membership(team: Team, db: Any, login: Any) -> None:
    await data(
        await team.owner_client.delete(
            f"/api/v1/accounts/{team.account_id}/members/{team.member.id}"
        )
    )
    elsewhere = await login(team.member)
    await error(
        await elsewhere.post("/api/v1/accounts/switch", json={"accountId": str(team.account_id)}),
        403,
        "FORBIDDEN",
    )


async def test_switch_requires_auth_and_same_origin(
    make_client: Any, team: Team, factory: Any
) -> None:
    anonymous = await make_client()
    await error(
        await anonymous.post("/api/v1/accounts/switch", json={"accountId": str(team.account_id)}),
        401,
        "UNAUTHORIZED",
    )
    cross = await make_client(
        cookies=await factory.cookies(team.admin, team.account_id), origin="https://evil.example"
    )
    await error(
        await cross.post("/api/v1/accounts/switch", json={"accountId": str(team.admin.account_id)}),
        403,
        "FORBIDDEN",
    )


async def test_every_tenancy_route_is_in_the_openapi_document(client: Any) -> None:
    from tenantd.accounts.views import ROUTES

    response = await client.get("/api/v1/openapi.json")
    assert response.status == 200
    document = await response.json()
    for spec in ROUTES.specs:
        operation = document["paths"][spec.path][spec.method.lower()]
        assert str(spec.status) in operation["responses"], spec.name
