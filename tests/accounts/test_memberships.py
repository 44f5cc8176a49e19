"""Memberships: list, role changes, removal, leave, transfer of ownership, both invariants."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg2
import pytest

from tests.accounts.helpers import Team, audit_actions
from tests.helpers import data, error


def members_url(team: Team, user_id: uuid.UUID | None = None) -> str:
    base = f"/api/v1/accounts/{team.account_id}/members"
    return f"{base}/{user_id}" if user_id else base


async def active_roles(db: Any, account_id: uuid.UUID) -> dict[uuid.UUID, str]:
    rows = await db.fetch_all(
        "SELECT user_id, role FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
        {"a": account_id},
    )
    return {row["user_id"]: row["role"] for row in rows}


async def test_any_member_lists_members(team: Team) -> None:
    listed = await data(await team.member_client.get(members_url(team)))
    assert (listed[0]["userId"], listed[0]["role"]) == (str(team.owner.id), "owner")
    assert {m["userId"]: m["role"] for m in listed} == {
        str(team.owner.id): "owner",
        str(team.admin.id): "admin",
        str(team.member.id): "member",
    }
    assert {m["email"] for m in listed} == {team.owner.email, team.admin.email, team.member.email}
    assert set(listed[0]) == {"userId", "email", "role", "createdAt"}


async def test_admin_changes_roles_between_admin_and_member(team: Team, db: Any) -> None:
    promoted = await data(
        await team.admin_client.patch(members_url(team, team.member.id), json={"role": "admin"})
    )
    assert promoted["role"] == "admin"
    demoted = await data(
        await team.owner_client.patch(members_url(team, team.member.id), json={"role": "member"})
    )
    assert demoted["role"] == "member"
    rows = await db.fetch_all(
        "SELECT actor_user_id, target, data FROM audit_log"
        " WHERE account_id = %(a)s AND action = 'membership.role_changed' ORDER BY id",
        {"a": team.account_id},
    )
    assert [(r["actor_user_id"], r["target"], r["data"]) for r in rows] == [
        (team.admin.id, str(team.member.id), {"from": "member", "to": "admin"}),
        (team.owner.id, str(team.member.id), {"from": "admin", "to": "member"}),
    ]


async def test_role_changes_never_touch_the_owner_and_never_assign_owner(team: Team) -> None:
    for client in (team.admin_client, team.owner_client):
        await error(
            await client.patch(members_url(team, team.owner.id), json={"role": "member"}),
            403,
            "FORBIDDEN",
        )
    await error(
        await team.owner_client.patch(members_url(team, team.member.id), json={"role": "owner"}),
        422,
        "VALIDATION_ERROR",
    )
    await error(
        await team.member_client.patch(members_url(team, team.admin.id), json={"role": "member"}),
        403,
        "FORBIDDEN",
    )
    await error(
        await team.owner_client.patch(members_url(team, uuid.uuid4()), json={"role": "admin"}),
        404,
        "NOT_FOUND",
    )


async def test_remove_member_keeps_the_row_and_ends_access(team: Team, db: Any, login: Any) -> None:
    removed = await data(await team.admin_client.delete(members_url(team, team.member.id)))
    assert removed["revokedAt"] is not None
    row = await db.fetch_one(
        "SELECT role, revoked_at FROM memberships WHERE account_id = %(a)s AND user_id = %(u)s",
        {"a": team.account_id, "u": team.member.id},
    )
    assert row["revoked_at"] is not None and row["role"] == "member"
    # The removed member's token for this account is refused at once.
    await error(await team.member_client.get(members_url(team)), 401, "UNAUTHORIZED")
    # Removing again: no active membership.
    await error(await team.admin_client.delete(members_url(team, team.member.id)), 404)
    assert (await audit_actions(db, team.account_id))[-1] == "membership.revoked"


async def test_admins_cannot_remove_the_owner(team: Team, db: Any) -> None:
    await error(await team.admin_client.delete(members_url(team, team.owner.id)), 403, "FORBIDDEN")
    await error(await team.owner_client.delete(members_url(team, team.owner.id)), 403, "FORBIDDEN")
    await error(await team.member_client.delete(members_url(team, team.admin.id)), 403, "FORBIDDEN")
    assert (await active_roles(db, team.account_id))[team.owner.id] == "owner"


async def test_owner_cannot_leave(team: Team, db: Any) -> None:
    await error(
        await team.owner_client.post(f"/api/v1/accounts/{team.account_id}/leave"),
        409,
        "OWNER_CANNOT_LEAVE",
    )
    assert (await active_roles(db, team.account_id))[team.owner.id] == "owner"


@pytest.mark.parametrize("who", ["member", "admin"])
async def test_member_and_admin_leave(who: str, team: Team, db: Any) -> None:
    user = team.member if who == "member" else team.admin
    client = team.member_client if who == "member" else team.admin_client
    left = await data(await client.post(f"/api/v1/accounts/{team.account_id}/leave"))
    assert left["membership"]["revokedAt"] is not None
    assert left["activeAccountId"] == str(user.account_id)  # back to the personal account
    assert user.id not in await active_roles(db, team.account_id)
    kept = await db.fetch_val(
        "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND user_id = %(u)s",
        {"a": team.account_id, "u": user.id},
    )
    assert kept == 1
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == str(user.account_id)
    rows = await db.fetch_all(
        "SELECT actor_user_id, data FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'membership.revoked'",
        {"a": team.account_id},
    )
    assert [(r["actor_user_id"], r["data"]["reason"]) for r in rows] == [(user.id, "left")]


async def test_rejoining_after_revocation_creates_a_new_row(
    team: Team, db: Any, factory: Any
) -> None:
    await data(await team.admin_client.delete(members_url(team, team.member.id)))
    await factory.member(team.account_id, team.member.id, "member")
    count = await db.fetch_val(
        "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND user_id = %(u)s",
        {"a": team.account_id, "u": team.member.id},
    )
    assert count == 2


# -- invariants in the database ------------------------------------------------------------------


async def test_database_refuses_two_active_memberships_per_user(team: Team, db: Any) -> None:
    with pytest.raises(psycopg2.IntegrityError, match="memberships_active_key"):
        await db.execute(
            "INSERT INTO memberships (account_id, user_id, role) VALUES (%(a)s, %(u)s, 'member')",
            {"a": team.account_id, "u": team.member.id},
        )


async def test_database_refuses_two_active_owners(team: Team, db: Any) -> None:
    with pytest.raises(psycopg2.IntegrityError, match="memberships_one_owner_key"):
        await db.execute(
            "UPDATE memberships SET role = 'owner' WHERE account_id = %(a)s AND user_id = %(u)s",
            {"a": team.account_id, "u": team.admin.id},
        )


# -- transfer ownership ----------------------------------------------------------------------


def transfer_url(team: Team) -> str:
    return f"/api/v1/accounts/{team.account_id}/transfer-ownership"


async def test_transfer_demotes_owner_and_promotes_target(team: Team, db: Any, login: Any) -> None:
    done = await data(
        await team.owner_client.post(transfer_url(team), json={"userId": str(team.member.id)})
    )
    assert done["owner"]["userId"] == str(team.member.id) and done["owner"]["role"] == "owner"
    assert done["previousOwner"]["role"] == "admin"
    roles = await active_roles(db, team.account_id)
    assert roles == {team.owner.id: "admin", team.member.id: "owner", team.admin.id: "admin"}
    row = await db.fetch_one(
        "SELECT actor_user_id, target FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'ownership.transferred'",
        {"a": team.account_id},
    )
    assert (row["actor_user_id"], row["target"]) == (team.owner.id, str(team.member.id))
    # The former owner is now an admin: no second transfer, and it may leave.
    await error(
        await team.owner_client.post(transfer_url(team), json={"userId": str(team.admin.id)}),
        403,
        "FORBIDDEN",
    )
    new_owner = await login(team.member, team.account_id)
    await error(
        await new_owner.post(f"/api/v1/accounts/{team.account_id}/leave"), 409, "OWNER_CANNOT_LEAVE"
    )
    await data(await team.owner_client.post(f"/api/v1/accounts/{team.account_id}/leave"))


async def test_transfer_refusals(team: Team, factory: Any, db: Any) -> None:
    stranger = await factory.user(password=None)
    await error(
        await team.admin_client.post(transfer_url(team), json={"userId": str(team.member.id)}),
        403,
        "FORBIDDEN",
    )
    await error(
        await team.owner_client.post(transfer_url(team), json={"userId": str(stranger.id)}),
        404,
        "NOT_FOUND",
    )
    await error(
        await team.owner_client.post(transfer_url(team), json={"userId": str(team.owner.id)}),
        409,
        "CONFLICT",
    )
    # A revoked member is not a valid target.
    await data(await team.owner_client.delete(members_url(team, team.member.id)))
    await error(
        await team.owner_client.post(transfer_url(team), json={"userId": str(team.member.id)}),
        404,
        "NOT_FOUND",
    )
    assert (await active_roles(db, team.account_id))[team.owner.id] == "owner"


async def test_transfer_rechecks_ownership_from_the_database(
    team: Team, db: Any, services: Any
) -> None:
    """A principal that still says 'owner' (cached) is not trusted: the lock re-reads it."""
    from tenantd.accounts.memberships import transfer_ownership
    from tenantd.errors import Forbidden
    from tests.accounts.helpers import principal

    await db.execute(
        "UPDATE memberships SET role = 'admin' WHERE account_id = %(a)s AND user_id = %(u)s",
        {"a": team.account_id, "u": team.owner.id},
    )
    stale = principal(team.owner, team.account_id, role="owner")
    with pytest.raises(Forbidden):
        await transfer_ownership(services, stale, team.account_id, user_id=team.member.id)
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND role = 'owner'"
            " AND revoked_at IS NULL",
            {"a": team.account_id},
        )
        == 0
    )


async def test_concurrent_transfers_leave_exactly_one_owner(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    """24 transfers at once, to 8 targets, from the owner and from each target in turn."""
    targets = [await factory.user(account=False, password=None) for _ in range(8)]
    for target in targets:
        await factory.member(team.account_id, target.id, "member")
    clients = [team.owner_client] + [await login(t, team.account_id) for t in targets]
    requests = []
    for i in range(24):
        client = clients[i % len(clients)]
        target = targets[(i * 5 + 3) % len(targets)]
        requests.append(client.post(transfer_url(team), json={"userId": str(target.id)}))
    responses = await asyncio.gather(*requests)
    statuses = sorted(r.status for r in responses)
    assert set(statuses) <= {200, 403, 409}, statuses
    assert statuses.count(200) >= 1
    owners = await db.fetch_all(
        "SELECT user_id FROM memberships WHERE account_id = %(a)s AND role = 'owner'"
        " AND revoked_at IS NULL",
        {"a": team.account_id},
    )
    assert len(owners) == 1
    transfers = await db.fetch_val(
        "SELECT count(*) FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'ownership.transferred'",
        {"a": team.account_id},
    )
    assert transfers == statuses.count(200)
    # Nobody lost their membership on the way.
    assert len(await active_roles(db, team.account_id)) == 3 + len(targets)


async def test_concurrent_transfers_from_the_owner_to_many_targets(
    team: Team, factory: Any, db: Any
) -> None:
    targets = [await factory.user(account=False, password=None) for _ in range(20)]
    for target in targets:
        await factory.member(team.account_id, target.id, "member")
    responses = await asyncio.gather(
        *(team.owner_client.post(transfer_url(team), json={"userId": str(t.id)}) for t in targets)
    )
    statuses = [r.status for r in responses]
    assert statuses.count(200) == 1, statuses
    assert statuses.count(403) == 19, statuses
    roles = await active_roles(db, team.account_id)
    assert list(roles.values()).count("owner") == 1
    assert roles[team.owner.id] == "admin"
