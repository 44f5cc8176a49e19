"""Isolation: every account-scoped route, walked by outsiders and by under-privileged members.

The rule under test: a URL account must be the token's aid. Any other live account is
403 FORBIDDEN, an unknown or soft-deleted one 404 NOT_FOUND; no data either way, no change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from tenantd.accounts.views import ROUTES
from tests.accounts.helpers import Team
from tests.helpers import data, error

# Restore is the one account route not scoped by the aid: a soft-deleted account is nobody's
# active account. Its own refusals are in tests/accounts/test_restore.py.
UNSCOPED = {("POST", "/api/v1/accounts/{id}/restore")}
SCOPED = [
    spec
    for spec in ROUTES.specs
    if "{id}" in spec.path and (spec.method, spec.path) not in UNSCOPED
]

# Lowest role each route needs (INTERFACE.md "Roles").
NEEDS = {
    ("GET", "/api/v1/accounts/{id}"): "member",
    ("PATCH", "/api/v1/accounts/{id}"): "admin",
    ("DELETE", "/api/v1/accounts/{id}"): "owner",
    ("POST", "/api/v1/accounts/{id}/transfer-ownership"): "owner",
    ("GET", "/api/v1/accounts/{id}/members"): "member",
    ("PATCH", "/api/v1/accounts/{id}/members/{userId}"): "admin",
    ("DELETE", "/api/v1/accounts/{id}/members/{userId}"): "admin",
    ("POST", "/api/v1/accounts/{id}/leave"): "member",
    ("GET", "/api/v1/accounts/{id}/invitations"): "admin",
    ("POST", "/api/v1/accounts/{id}/invitations"): "admin",
    ("POST", "/api/v1/accounts/{id}/invitations/{iid}/resend"): "admin",
    ("DELETE", "/api/v1/accounts/{id}/invitations/{iid}"): "admin",
    ("GET", "/api/v1/accounts/{id}/join-requests"): "admin",
    ("POST", "/api/v1/accounts/{id}/join-requests/{rid}/approve"): "admin",
    ("POST", "/api/v1/accounts/{id}/join-requests/{rid}/deny"): "admin",
    ("GET", "/api/v1/accounts/{id}/audit-log"): "admin",
    ("GET", "/api/v1/accounts/{id}/roles"): "member",
    ("POST", "/api/v1/accounts/{id}/roles"): "admin",
    ("PATCH", "/api/v1/accounts/{id}/roles/{key}"): "admin",
    ("DELETE", "/api/v1/accounts/{id}/roles/{key}"): "admin",
}
RANK = {"member": 1, "admin": 2, "owner": 3}


def test_every_scoped_route_is_covered() -> None:
    assert {(s.method, s.path) for s in SCOPED} == set(NEEDS)


@dataclass
class Victim:
    team: Team
    invitation_id: uuid.UUID
    join_request_id: uuid.UUID
    requester_id: uuid.UUID


@pytest.fixture
async def victim(team: Team, factory: Any, db: Any) -> Victim:
    issued = await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": "invitee@victim.example", "role": "member"},
        ),
        201,
    )
    requester = await factory.user(account=False, password=None)
    join_id = await db.fetch_val(
        "INSERT INTO join_requests (account_id, user_id, domain)"
        " VALUES (%(a)s, %(u)s, 'victim.example') RETURNING id",
        {"a": team.account_id, "u": requester.id},
    )
    await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/roles",
            json={"key": "auditor", "name": "Auditor", "permissions": ["audit:read"]},
        ),
        201,
    )
    return Victim(
        team=team,
        invitation_id=uuid.UUID(issued["invitation"]["id"]),
        join_request_id=join_id,
        requester_id=requester.id,
    )


def url_for(path: str, *, account_id: uuid.UUID, victim: Victim) -> str:
    return path.format(
        id=account_id,
        userId=victim.team.member.id,
        iid=victim.invitation_id,
        rid=victim.join_request_id,
        key="auditor",
    )


def body_for(method: str, path: str, victim: Victim) -> dict[str, Any] | None:
    if path.endswith("/transfer-ownership"):
        return {"userId": str(victim.team.member.id)}
    if path.endswith("/members/{userId}") and method == "PATCH":
        return {"role": "admin"}
    if path.endswith("/invitations") and method == "POST":
        return {"email": "intruder@evil.example", "role": "admin"}
    if path == "/api/v1/accounts/{id}" and method == "PATCH":
        return {"name": "pwned"}
    if path.endswith("/roles") and method == "POST":
        return {"key": "pwned", "name": "Pwned", "permissions": ["*"]}
    if path.endswith("/roles/{key}") and method == "PATCH":
        return {"permissions": ["*"]}
    return None


async def snapshot(db: Any, account_id: uuid.UUID) -> dict[str, Any]:
    """Everything a hostile request could change about the victim account."""
    return {
        "account": await db.fetch_one(
            "SELECT name, deleted_at FROM accounts WHERE id = %(a)s", {"a": account_id}
        ),
        "memberships": await db.fetch_all(
            "SELECT user_id, role, revoked_at FROM memberships WHERE account_id = %(a)s"
            " ORDER BY user_id",
            {"a": account_id},
        ),
        "invitations": await db.fetch_all(
            "SELECT id, email, token_hash, revoked_at, accepted_at FROM invitations"
            " WHERE account_id = %(a)s ORDER BY id",
            {"a": account_id},
        ),
        "roles": await db.fetch_all(
            "SELECT key, name, permissions FROM account_roles WHERE account_id = %(a)s"
            " ORDER BY key",
            {"a": account_id},
        ),
        "join_requests": await db.fetch_all(
            "SELECT id, status FROM join_requests WHERE account_id = %(a)s ORDER BY id",
            {"a": account_id},
        ),
    }


async def walk(client: Any, victim: Victim, account_id: uuid.UUID, expect: int) -> None:
    for spec in SCOPED:
        url = url_for(spec.path, account_id=account_id, victim=victim)
        body = body_for(spec.method, spec.path, victim)
        response = await client.request(spec.method, url, json=body)
        payload = await response.json()
        assert response.status == expect, (spec.name, payload)
        assert payload["success"] is False, spec.name
        assert "data" not in payload, spec.name
        text = str(payload)
        assert str(victim.team.member.id) not in text, spec.name
        assert "invitee@victim.example" not in text, spec.name


async def test_outsider_sees_403_on_every_route_and_nothing_changes(
    victim: Victim, factory: Any, login: Any, db: Any
) -> None:
    before = await snapshot(db, victim.team.account_id)
    outsider = await factory.user(plan="business", password=None)
    client = await login(outsider)  # token aid = the outsider's own account
    await walk(client, victim, victim.team.account_id, 403)
    assert await snapshot(db, victim.team.account_id) == before


async def test_member_of_both_with_other_active_account_gets_403(
    victim: Victim, login: Any, db: Any
) -> None:
    """Being a member is not enough: the URL account must be the token's account."""
    before = await snapshot(db, victim.team.account_id)
    # The owner of the victim account holds a token for another of its accounts.
    second = await data(
        await victim.team.owner_client.post("/api/v1/accounts", json={"name": "x"}), 201
    )
    client = await login(victim.team.owner, uuid.UUID(second["id"]))
    await walk(client, victim, victim.team.account_id, 403)
    assert await snapshot(db, victim.team.account_id) == before


async def test_user_without_active_account_gets_403(
    victim: Victim, factory: Any, login: Any, db: Any
) -> None:
    before = await snapshot(db, victim.team.account_id)
    homeless = await factory.user(account=False, password=None)
    client = await login(homeless)
    await walk(client, victim, victim.team.account_id, 403)
    assert await snapshot(db, victim.team.account_id) == before


async def test_unknown_and_soft_deleted_accounts_are_404(
    victim: Victim, factory: Any, login: Any, db: Any
) -> None:
    outsider = await factory.user(password=None)
    client = await login(outsider)
    await walk(client, victim, uuid.uuid4(), 404)
    gone = await factory.user(password=None)
    await db.execute(
        "UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": gone.account_id}
    )
    await walk(client, victim, gone.account_id, 404)
    for spec in SCOPED:
        url = spec.path.replace("{id}", "not-a-uuid").format(
            userId=uuid.uuid4(), iid=uuid.uuid4(), rid=uuid.uuid4(), key="auditor"
        )
        response = await client.request(
            spec.method, url, json=body_for(spec.method, spec.path, victim)
        )
        assert response.status == 404, spec.name


async def test_own_account_in_url_cannot_reach_another_accounts_rows(
    victim: Victim, factory: Any, login: Any, db: Any
) -> None:
    """Sub-resource ids of another account under one's own account id: 404, no change."""
    before = await snapshot(db, victim.team.account_id)
    outsider = await factory.user(plan="business", password=None)
    client = await login(outsider)
    own = outsider.account_id
    checks = [
        ("PATCH", f"/api/v1/accounts/{own}/members/{victim.team.member.id}", {"role": "admin"}),
        ("DELETE", f"/api/v1/accounts/{own}/members/{victim.team.member.id}", None),
        (
            "POST",
            f"/api/v1/accounts/{own}/transfer-ownership",
            {"userId": str(victim.team.member.id)},
        ),
        ("POST", f"/api/v1/accounts/{own}/invitations/{victim.invitation_id}/resend", None),
        ("DELETE", f"/api/v1/accounts/{own}/invitations/{victim.invitation_id}", None),
        ("POST", f"/api/v1/accounts/{own}/join-requests/{victim.join_request_id}/approve", None),
        ("POST", f"/api/v1/accounts/{own}/join-requests/{victim.join_request_id}/deny", None),
    ]
    for method, url, body in checks:
        await error(await client.request(method, url, json=body), 404, "NOT_FOUND")
    # Listings of one's own account never include the other account's rows.
    assert await data(await client.get(f"/api/v1/accounts/{own}/invitations")) == []
    assert await data(await client.get(f"/api/v1/accounts/{own}/join-requests")) == []
    members = await data(await client.get(f"/api/v1/accounts/{own}/members"))
    assert [m["userId"] for m in members] == [str(outsider.id)]
    assert await snapshot(db, victim.team.account_id) == before


@pytest.mark.parametrize("role", ["member", "admin"])
async def test_members_without_the_needed_role_get_403(role: str, victim: Victim, db: Any) -> None:
    client = victim.team.member_client if role == "member" else victim.team.admin_client
    before = await snapshot(db, victim.team.account_id)
    refused = 0
    for spec in SCOPED:
        if RANK[role] >= RANK[NEEDS[(spec.method, spec.path)]]:
            continue
        url = url_for(spec.path, account_id=victim.team.account_id, victim=victim)
        if spec.path.endswith("/members/{userId}"):
            url = url.replace(str(victim.team.member.id), str(victim.team.admin.id))
        response = await client.request(
            spec.method, url, json=body_for(spec.method, spec.path, victim)
        )
        payload = await response.json()
        assert response.status == 403, (spec.name, payload)
        assert payload["error"]["code"] == "FORBIDDEN"
        refused += 1
    assert refused == (16 if role == "member" else 2)
    assert await snapshot(db, victim.team.account_id) == before
