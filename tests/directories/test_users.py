"""SCIM Users: the token, linking by address, memberships within the seat cap, the PATCH forms
Entra ID and Okta send, deprovisioning that ends sessions at once, filters and pages."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.accounts.helpers import Login
from tests.directories.conftest import Directory, scim_json, scim_user
from tests.factories import Factory, UserRecord
from tests.helpers import data, error

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def patch(*operations: dict[str, Any]) -> dict[str, Any]:
    return {"schemas": [PATCH], "Operations": list(operations)}


async def create(directory: Directory, body: dict[str, Any], status: int = 201) -> Any:
    return await scim_json(await directory.scim.post(f"{directory.base}/Users", json=body), status)


async def role_of(db: Any, account_id: uuid.UUID, user_id: uuid.UUID) -> str | None:
    role: str | None = await db.fetch_val(
        "SELECT role FROM memberships WHERE account_id = %(a)s AND user_id = %(u)s"
        " AND revoked_at IS NULL",
        {"a": account_id, "u": user_id},
    )
    return role


async def user_id_of(db: Any, email: str) -> uuid.UUID:
    found: uuid.UUID = await db.fetch_val(
        "SELECT id FROM users WHERE lower(email) = lower(%(e)s)", {"e": email}
    )
    return found


# -- the token ------------------------------------------------------------------------------------


async def test_no_or_a_wrong_token_is_401_in_scim_form(
    directory: Directory, make_client: Any
) -> None:
    anonymous = await make_client(origin=None)
    url = f"{directory.base}/Users"
    for headers in ({}, {"Authorization": "Bearer scim_wrong"}, {"Authorization": "Basic x"}):
        response = await anonymous.get(url, headers=headers)
        body = await scim_json(response, 401)
        assert body["schemas"] == [ERROR] and body["status"] == "401"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    # Another directory's token, an unknown directory and a malformed id: 401 alike.
    other = f"/scim/v2/{uuid.uuid4()}/Users"
    auth = {"Authorization": f"Bearer {directory.token}"}
    await scim_json(await anonymous.get(other, headers=auth), 401)
    await scim_json(await anonymous.get("/scim/v2/not-an-id/Users", headers=auth), 401)
    # A deleted directory's token stops working.
    team = directory.team
    await data(
        await team.owner_client.delete(
            f"/api/v1/accounts/{team.account_id}/directories/{directory.id}"
        )
    )
    await scim_json(await directory.scim.get(url), 401)


async def test_directories_are_managed_by_owners_and_admins_and_list_no_token(
    directory: Directory,
) -> None:
    team = directory.team
    url = f"/api/v1/accounts/{team.account_id}/directories"
    listed = await data(await team.admin_client.get(url))
    assert [d["id"] for d in listed] == [str(directory.id)]
    assert "token" not in listed[0]
    assert listed[0]["scimBaseUrl"].endswith(f"/scim/v2/{directory.id}")
    await error(await team.member_client.get(url), 403)
    await error(await team.member_client.post(url, json={}), 403)
    created = await data(await team.admin_client.post(url, json={}), 201)
    assert created["token"].startswith("scim_")


# -- create and link ------------------------------------------------------------------------------


async def test_create_makes_a_verified_user_and_a_member(directory: Directory, db: Any) -> None:
    body = await create(
        directory,
        scim_user(
            "Ada.Lovelace@Example.com",
            externalId="00u1",
            name={"givenName": "Ada", "familyName": "Lovelace"},
        ),
    )
    assert body["userName"] == "Ada.Lovelace@Example.com" and body["active"] is True
    assert body["meta"]["resourceType"] == "User"
    assert body["meta"]["location"].endswith(f"{directory.base}/Users/{body['id']}")
    user = await db.fetch_one(
        "SELECT id, email, first_name, email_verified_at FROM users"
        " WHERE email = 'ada.lovelace@example.com'"
    )
    assert user["first_name"] == "Ada" and user["email_verified_at"] is not None
    assert await role_of(db, directory.team.account_id, user["id"]) == "member"
    got = await scim_json(await directory.scim.get(f"{directory.base}/Users/{body['id']}"))
    assert got["externalId"] == "00u1" and got["name"]["familyName"] == "Lovelace"


async def test_the_address_is_the_primary_email_when_user_name_is_not_one(
    directory: Directory, db: Any
) -> None:
    await create(
        directory,
        scim_user(
            "grace",
            emails=[
                {"value": "g.hopper@home.example", "type": "home"},
                {"value": "grace@navy.example", "type": "work", "primary": True},
            ],
        ),
    )
    user_id = await user_id_of(db, "grace@navy.example")
    assert await role_of(db, directory.team.account_id, user_id) == "member"


async def test_an_existing_user_is_linked(directory: Directory, db: Any, factory: Factory) -> None:
    existing = await factory.user(password=None)
    body = await create(directory, scim_user(existing.email.upper()))
    assert await user_id_of(db, existing.email) == existing.id
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM users WHERE lower(email) = lower(%(e)s)", {"e": existing.email}
        )
        == 1
    )
    assert await role_of(db, directory.team.account_id, existing.id) == "member"
    linked = await db.fetch_val(
        "SELECT user_id FROM directory_users WHERE id = %(i)s", {"i": uuid.UUID(body["id"])}
    )
    assert linked == existing.id


async def test_a_user_name_taken_is_409_uniqueness(directory: Directory) -> None:
    await create(directory, scim_user("dup@example.com"))
    body = await create(directory, scim_user("DUP@example.com"), 409)
    assert body["scimType"] == "uniqueness"


async def test_two_creates_of_one_user_name_at_once_make_one_user(
    directory: Directory, db: Any
) -> None:
    url = f"{directory.base}/Users"
    responses = await asyncio.gather(
        *(directory.scim.post(url, json=scim_user("race@example.com")) for _ in range(2))
    )
    assert sorted(r.status for r in responses) == [201, 409]
    assert await db.fetch_val("SELECT count(*) FROM directory_users") == 1
    assert await db.fetch_val("SELECT count(*) FROM users WHERE email = 'race@example.com'") == 1
    user_id = await user_id_of(db, "race@example.com")
    assert await role_of(db, directory.team.account_id, user_id) == "member"


async def test_over_the_seat_cap_is_a_scim_error_and_creates_nothing(
    directory: Directory, db: Any, factory: Factory
) -> None:
    team = directory.team
    await factory.set_plan(team.account_id, "team", seats=4)  # owner, admin, member + 1
    await create(directory, scim_user("fourth@example.com"))
    body = await create(directory, scim_user("fifth@example.com"), 409)
    assert body["schemas"] == [ERROR] and "SEAT_LIMIT_REACHED" in body["detail"]
    assert await db.fetch_val("SELECT count(*) FROM users WHERE email = 'fifth@example.com'") == 0
    assert await db.fetch_val("SELECT count(*) FROM directory_users") == 1


async def test_a_user_without_an_address_waits_for_one(directory: Directory, db: Any) -> None:
    body = await create(directory, scim_user("no-address"))
    assert await db.fetch_val("SELECT user_id FROM directory_users") is None
    await scim_json(
        await directory.scim.patch(
            f"{directory.base}/Users/{body['id']}",
            json=patch({"op": "add", "path": "emails", "value": [{"value": "late@example.com"}]}),
        )
    )
    user_id = await user_id_of(db, "late@example.com")
    assert await role_of(db, directory.team.account_id, user_id) == "member"


# -- deprovisioning -------------------------------------------------------------------------------


async def signed_in(
    directory: Directory, db: Any, login: Login, factory: Factory, email: str
) -> tuple[str, uuid.UUID, Any]:
    """A directory user signed in to the directory's account: (scim id, user id, browser)."""
    body = await create(directory, scim_user(email))
    user_id = await user_id_of(db, email)
    record = UserRecord(id=user_id, email=email, password="", account_id=None)
    browser = await login(record, directory.team.account_id)
    response = await browser.get("/api/v1/users/me")
    me = await response.json()
    assert response.status == 200 and me["account"]["id"] == str(directory.team.account_id)
    return body["id"], user_id, browser


async def assert_signed_out(
    db: Any, browser: Any, user_id: uuid.UUID, account_id: uuid.UUID
) -> None:
    await error(await browser.get("/api/v1/users/me"), 401)
    await error(await browser.post("/api/v1/auth/refresh"), 401)
    live = await db.fetch_val(
        "SELECT count(*) FROM sessions WHERE user_id = %(u)s AND account_id = %(a)s"
        " AND revoked_at IS NULL",
        {"u": user_id, "a": account_id},
    )
    assert live == 0
    assert await role_of(db, account_id, user_id) is None


async def test_entra_deactivation_ends_membership_and_sessions_at_once(
    directory: Directory, db: Any, login: Login, factory: Factory
) -> None:
    scim_id, user_id, browser = await signed_in(directory, db, login, factory, "e@example.com")
    body = await scim_json(
        await directory.scim.patch(
            f"{directory.base}/Users/{scim_id}",
            json=patch({"op": "Replace", "path": "active", "value": "False"}),
        )
    )
    assert body["active"] is False
    await assert_signed_out(db, browser, user_id, directory.team.account_id)
    actions = await db.fetch_all(
        "SELECT action, data FROM audit_log WHERE account_id = %(a)s ORDER BY id",
        {"a": directory.team.account_id},
    )
    revoked = [a["data"] for a in actions if a["action"] == "membership.revoked"]
    assert revoked[0]["reason"] == "directory_deactivated" and revoked[0]["sessionsEnded"] == 1
    assert "directory.user.deactivated" in [a["action"] for a in actions]


async def test_okta_deactivation_by_a_value_object_and_reactivation(
    directory: Directory, db: Any, login: Login, factory: Factory
) -> None:
    scim_id, user_id, browser = await signed_in(directory, db, login, factory, "o@example.com")
    url = f"{directory.base}/Users/{scim_id}"
    await scim_json(
        await directory.scim.patch(url, json=patch({"op": "replace", "value": {"active": False}}))
    )
    await assert_signed_out(db, browser, user_id, directory.team.account_id)
    await scim_json(
        await directory.scim.patch(url, json=patch({"op": "replace", "value": {"active": True}}))
    )
    assert await role_of(db, directory.team.account_id, user_id) == "member"


async def test_put_with_active_false_and_delete_deprovision(
    directory: Directory, db: Any, login: Login, factory: Factory
) -> None:
    scim_id, user_id, browser = await signed_in(directory, db, login, factory, "p@example.com")
    url = f"{directory.base}/Users/{scim_id}"
    await scim_json(await directory.scim.put(url, json=scim_user("p@example.com", active=False)))
    await assert_signed_out(db, browser, user_id, directory.team.account_id)

    scim_id, user_id, browser = await signed_in(directory, db, login, factory, "d@example.com")
    url = f"{directory.base}/Users/{scim_id}"
    response = await directory.scim.delete(url)
    assert response.status == 204
    await assert_signed_out(db, browser, user_id, directory.team.account_id)
    await scim_json(await directory.scim.get(url), 404)
    assert await db.fetch_val("SELECT count(*) FROM users WHERE id = %(u)s", {"u": user_id}) == 1


async def test_the_owner_cannot_be_deprovisioned(directory: Directory, db: Any) -> None:
    owner = directory.team.owner
    body = await create(directory, scim_user(owner.email))
    response = await directory.scim.patch(
        f"{directory.base}/Users/{body['id']}",
        json=patch({"op": "replace", "path": "active", "value": False}),
    )
    await scim_json(response, 409)
    assert await role_of(db, directory.team.account_id, owner.id) == "owner"


# -- filters and pages ----------------------------------------------------------------------------


async def test_filters_and_pages(directory: Directory) -> None:
    for n in range(5):
        await create(directory, scim_user(f"u{n}@example.com", externalId=f"ext-{n}"))
    url = f"{directory.base}/Users"
    found = await scim_json(
        await directory.scim.get(url, params={"filter": 'userName eq "U3@EXAMPLE.com"'})
    )
    assert found["totalResults"] == 1 and found["Resources"][0]["userName"] == "u3@example.com"
    found = await scim_json(
        await directory.scim.get(url, params={"filter": 'externalId eq "ext-1"'})
    )
    assert [r["userName"] for r in found["Resources"]] == ["u1@example.com"]
    found = await scim_json(
        await directory.scim.get(url, params={"filter": 'externalId eq "EXT-1"'})
    )
    assert found["totalResults"] == 0  # externalId is case-exact
    found = await scim_json(await directory.scim.get(url, params={"filter": 'userName sw "u"'}))
    assert found["totalResults"] == 5
    page = await scim_json(await directory.scim.get(url, params={"startIndex": "2", "count": "2"}))
    assert page["totalResults"] == 5 and page["startIndex"] == 2 and page["itemsPerPage"] == 2
    assert [r["userName"] for r in page["Resources"]] == ["u1@example.com", "u2@example.com"]
    last = await scim_json(await directory.scim.get(url, params={"startIndex": "5", "count": "10"}))
    assert [r["userName"] for r in last["Resources"]] == ["u4@example.com"]
    bad = await scim_json(await directory.scim.get(url, params={"filter": "userName eq"}), 400)
    assert bad["scimType"] == "invalidFilter"


async def test_events_and_audit_entries(directory: Directory, db: Any) -> None:
    body = await create(directory, scim_user("ev@example.com"))
    url = f"{directory.base}/Users/{body['id']}"
    await scim_json(
        await directory.scim.patch(
            url, json=patch({"op": "replace", "path": "displayName", "value": "Ev"})
        )
    )
    assert (await directory.scim.delete(url)).status == 204
    rows = await db.fetch_all(
        "SELECT type, actor_type, actor_id, data FROM outbox_events"
        " WHERE type LIKE 'directory.%%' ORDER BY id"
    )
    assert [r["type"] for r in rows] == [
        "directory.user.created",
        "directory.user.updated",
        "directory.user.deleted",
    ]
    assert {(r["actor_type"], r["actor_id"]) for r in rows} == {
        ("system", f"directory:{directory.id}")
    }
    assert rows[0]["data"]["userName"] == "ev@example.com"
    actions = [
        r["action"]
        for r in await db.fetch_all(
            "SELECT action FROM audit_log WHERE account_id = %(a)s ORDER BY id",
            {"a": directory.team.account_id},
        )
    ]
    for action in (
        "directory.created",
        "directory.user.linked",
        "membership.created",
        "directory.user.created",
        "directory.user.updated",
        "membership.revoked",
        "directory.user.deleted",
    ):
        assert action in actions
