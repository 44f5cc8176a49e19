"""Every route guarded by a permission, walked with custom roles (issue 30 part 3).

1. The call graph of every route of the API router and of the hosted pages (read from the
   source like tests/test_sensitive_routes.py does): a route that reaches a permission of
   tenantd/identity/permissions.py must be in GUARDED (so a new route cannot slip by) or be
   a page that only shows what the role allows (SHOWN); each GUARDED permission is reached.
2. Each GUARDED route is driven twice with a member holding a custom role: one lacking the
   route's permission (holding every other one) is refused, 403, and nothing changes; one
   holding it (and the member's reading rights) is served. The owner's own permissions are
   never held by a custom role, even through `*`: those routes refuse both.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tenantd.identity import permissions
from tenantd.settings import Settings
from tenantd.ui import csrf
from tests.accounts.helpers import Login
from tests.factories import Factory
from tests.helpers import data
from tests.notifications.support import EVENT_MODULE
from tests.test_sensitive_routes import (
    Target,
    aliases,
    every_route,
    form_token,
    functions,
    is_module,
    references,
)

MODULE = permissions.__name__
CONSTANTS = {
    name: value
    for name, value in vars(permissions).items()
    if name.isupper() and isinstance(value, str) and value in permissions.TENANTD
}
# What every member holds: a role given to test a route also reads the account.
READING = [permissions.ACCOUNT_READ, permissions.MEMBERS_READ]
EVENT = "comment.created"  # of the fixture event module


@dataclass(frozen=True)
class Case:
    permission: str
    path: dict[str, str] = field(default_factory=dict)  # placeholder -> fixture name
    json: dict[str, Any] | None = None
    form: dict[str, str] | None = None
    ok: int = 200
    url: str | None = None  # a concrete path (a page route with a pattern in it)


ID = {"id": "account"}
GUARDED: dict[tuple[str, str], Case] = {
    ("GET", "/api/v1/accounts/{id}"): Case(permissions.ACCOUNT_READ, ID),
    ("PATCH", "/api/v1/accounts/{id}"): Case(permissions.ACCOUNT_UPDATE, ID, {"name": "New"}),
    ("DELETE", "/api/v1/accounts/{id}"): Case(permissions.ACCOUNT_DELETE, ID),
    ("POST", "/api/v1/accounts/{id}/transfer-ownership"): Case(
        permissions.OWNERSHIP_TRANSFER, ID, {"userId": "target"}
    ),
    ("GET", "/api/v1/accounts/{id}/members"): Case(permissions.MEMBERS_READ, ID),
    ("PATCH", "/api/v1/accounts/{id}/members/{userId}"): Case(
        permissions.MEMBERS_CHANGE_ROLE, {**ID, "userId": "target"}, {"role": "spare"}
    ),
    ("DELETE", "/api/v1/accounts/{id}/members/{userId}"): Case(
        permissions.MEMBERS_REMOVE, {**ID, "userId": "target"}
    ),
    ("GET", "/api/v1/accounts/{id}/invitations"): Case(permissions.MEMBERS_INVITE, ID),
    ("POST", "/api/v1/accounts/{id}/invitations"): Case(
        permissions.MEMBERS_INVITE, ID, {"email": "new@walk.example", "role": "member"}, ok=201
    ),
    ("POST", "/api/v1/accounts/{id}/invitations/{iid}/resend"): Case(
        permissions.MEMBERS_INVITE, {**ID, "iid": "invitation"}
    ),
    ("DELETE", "/api/v1/accounts/{id}/invitations/{iid}"): Case(
        permissions.MEMBERS_INVITE, {**ID, "iid": "invitation"}
    ),
    ("GET", "/api/v1/accounts/{id}/join-requests"): Case(permissions.JOIN_REQUESTS_DECIDE, ID),
    ("POST", "/api/v1/accounts/{id}/join-requests/{rid}/approve"): Case(
        permissions.JOIN_REQUESTS_DECIDE, {**ID, "rid": "join_request"}
    ),
    ("POST", "/api/v1/accounts/{id}/join-requests/{rid}/deny"): Case(
        permissions.JOIN_REQUESTS_DECIDE, {**ID, "rid": "join_request"}
    ),
    ("GET", "/api/v1/accounts/{id}/audit-log"): Case(permissions.AUDIT_READ, ID),
    ("GET", "/api/v1/accounts/{id}/roles"): Case(permissions.MEMBERS_READ, ID),
    ("POST", "/api/v1/accounts/{id}/roles"): Case(
        permissions.ROLES_MANAGE, ID, {"key": "fresh", "name": "Fresh", "permissions": []}, ok=201
    ),
    ("PATCH", "/api/v1/accounts/{id}/roles/{key}"): Case(
        permissions.ROLES_MANAGE, {**ID, "key": "spare_key"}, {"name": "Renamed"}
    ),
    ("DELETE", "/api/v1/accounts/{id}/roles/{key}"): Case(
        permissions.ROLES_MANAGE, {**ID, "key": "unused_key"}
    ),
    ("PUT", "/api/v1/accounts/{id}/notification-defaults"): Case(
        permissions.NOTIFICATIONS_MANAGE_DEFAULTS,
        ID,
        {"eventType": EVENT, "channel": "email", "enabled": False},
    ),
    ("GET", "/api/v1/accounts/{id}/sso-connections"): Case(permissions.SSO_MANAGE, ID),
    ("POST", "/api/v1/accounts/{id}/sso-connections"): Case(
        permissions.SSO_MANAGE,
        ID,
        {
            "type": "oidc",
            "domains": ["fresh-sso.walk.example"],
            "issuer": "https://fresh.idp.walk.example",
            "clientId": "fresh",
            "clientSecret": "fresh-secret",
        },
        ok=201,
    ),
    ("PATCH", "/api/v1/accounts/{id}/sso-connections/{cid}"): Case(
        permissions.SSO_MANAGE, {**ID, "cid": "connection"}, {"enforce": True}
    ),
    ("DELETE", "/api/v1/accounts/{id}/sso-connections/{cid}"): Case(
        permissions.SSO_MANAGE, {**ID, "cid": "connection"}
    ),
    ("GET", "/api/v1/accounts/{id}/directories"): Case(permissions.DIRECTORIES_MANAGE, ID),
    ("POST", "/api/v1/accounts/{id}/directories"): Case(
        permissions.DIRECTORIES_MANAGE, ID, {"name": "Fresh"}, ok=201
    ),
    ("DELETE", "/api/v1/accounts/{id}/directories/{directoryId}"): Case(
        permissions.DIRECTORIES_MANAGE, {**ID, "directoryId": "directory"}
    ),
    ("GET", "/api/v1/accounts/{id}/directories/{directoryId}/groups"): Case(
        permissions.DIRECTORIES_MANAGE, {**ID, "directoryId": "directory"}
    ),
    ("PUT", "/api/v1/accounts/{id}/directories/{directoryId}/groups/{groupId}/role"): Case(
        permissions.DIRECTORIES_MANAGE,
        {**ID, "directoryId": "directory", "groupId": "group"},
        {"role": "member"},  # a role no wider than the caller's own
    ),
    ("POST", "/api/v1/accounts/{id}/admin-portal-links"): Case(
        permissions.PORTAL_CREATE, ID, {"intent": "sso"}, ok=201
    ),
    # hosted pages (forms): refused with the page and 403; served with a redirect
    ("POST", "/accounts/{id}/rename"): Case(permissions.ACCOUNT_UPDATE, ID, form={"name": "N"}),
    ("POST", "/accounts/{id}/members/invite"): Case(
        permissions.MEMBERS_INVITE, ID, form={"email": "page@walk.example", "role": "member"}
    ),
    ("POST", "/accounts/{id}/members/{userId}/role"): Case(
        permissions.MEMBERS_CHANGE_ROLE, {**ID, "userId": "target"}, form={"role": "spare"}
    ),
    ("POST", "/accounts/{id}/members/{userId}/remove"): Case(
        permissions.MEMBERS_REMOVE, {**ID, "userId": "target"}, form={}
    ),
    ("POST", "/accounts/{id}/invitations/{iid}/resend"): Case(
        permissions.MEMBERS_INVITE, {**ID, "iid": "invitation"}, form={}
    ),
    ("POST", "/accounts/{id}/invitations/{iid}/revoke"): Case(
        permissions.MEMBERS_INVITE, {**ID, "iid": "invitation"}, form={}
    ),
    ("POST", "/accounts/{id}/transfer"): Case(
        permissions.OWNERSHIP_TRANSFER, ID, form={"userId": "target"}
    ),
    ("POST", "/accounts/{id}/delete"): Case(permissions.ACCOUNT_DELETE, ID, form={}),
    ("POST", "/accounts/{id}/require-mfa"): Case(
        permissions.ACCOUNT_REQUIRE_MFA, ID, form={"requireMfa": "true"}
    ),
    ("POST", "/join-requests/{rid}/{decision:approve|deny}"): Case(
        permissions.JOIN_REQUESTS_DECIDE, form={}, url="/join-requests/{join_request}/deny"
    ),
    ("POST", "/accounts/{id}/notification-defaults"): Case(
        permissions.NOTIFICATIONS_MANAGE_DEFAULTS, ID, form={}
    ),
}
# Pages that show what the viewer's role allows (the forms on them are driven above) and
# leaving, which every member but the owner may do: they reach permissions only to decide
# what to show.
SHOWN = {
    ("GET", "/accounts/{id}/members"),
    ("GET", "/join-requests"),
    ("POST", "/accounts/{id}/leave"),
}


# -- 1. the call graph -------------------------------------------------------------------------


def named(module: str, node: ast.AST) -> Iterator[str]:
    """The permissions a function's body names (`permissions.X`, or X imported)."""
    imported = aliases(module)
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and imported.get(sub.value.id) == MODULE
            and sub.attr in CONSTANTS
        ):
            yield CONSTANTS[sub.attr]
        elif (
            isinstance(sub, ast.Name)
            and imported.get(sub.id) == (MODULE, sub.id)
            and sub.id in CONSTANTS
        ):
            yield CONSTANTS[sub.id]


def reached(start: Target) -> set[str]:
    """The permissions a route's function reaches through calls inside tenantd."""
    seen: set[Target] = set()
    todo = [start]
    found: set[str] = set()
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        module, name = target
        if not is_module(module):
            continue
        node = functions(module).get(name)
        if node is not None:
            found.update(named(module, node))
            todo.extend(references(module, node))
    return found


def test_every_route_that_reaches_a_permission_is_walked(app: web.Application) -> None:
    reaching = {(m, p): reached(t) for m, p, t in every_route(app)}
    reaching = {route: found for route, found in reaching.items() if found}
    missing = sorted(set(reaching) - set(GUARDED) - SHOWN)
    assert not missing, f"routes reach a permission but are not walked here: {missing}"
    unreached = sorted(route for route in GUARDED if route not in reaching)
    assert not unreached, f"GUARDED routes that reach no permission: {unreached}"
    for route, case in GUARDED.items():
        assert case.permission in reaching[route], (route, case.permission, reaching[route])
    guarded = {case.permission for case in GUARDED.values()}
    assert guarded == set(permissions.TENANTD)


def test_the_walk_sees_a_permission_through_a_page(app: web.Application) -> None:
    pages = {(m, p): t for m, p, t in every_route(app)}
    assert permissions.MEMBERS_REMOVE in reached(
        pages[("POST", "/accounts/{id}/members/{userId}/remove")]
    )
    assert reached(pages[("GET", "/api/v1/users/me")]) == set()


# -- 2. driving each route -----------------------------------------------------------------------


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = EVENT_MODULE  # an event type to set a default of
    return env


@dataclass
class Scene:
    values: dict[str, str]
    owner_client: Any


@pytest.fixture
async def scene(factory: Factory, login: Login, db: Any) -> Scene:
    owner = await factory.user(plan="business", password=None)
    assert owner.account_id is not None
    account = owner.account_id
    target = await factory.user(password=None)
    await factory.member(account, target.id, "member")
    owner_client = await login(owner)
    for key, grants in (("spare", []), ("spare_key", []), ("unused_key", [])):
        body = {"key": key, "name": key, "permissions": grants}
        await data(await owner_client.post(f"/api/v1/accounts/{account}/roles", json=body), 201)
    issued = await data(
        await owner_client.post(
            f"/api/v1/accounts/{account}/invitations",
            json={"email": "pending@walk.example", "role": "member"},
        ),
        201,
    )
    connection = await data(
        await owner_client.post(
            f"/api/v1/accounts/{account}/sso-connections",
            json={
                "type": "oidc",
                "domains": ["sso.walk.example"],
                "issuer": "https://idp.walk.example",
                "clientId": "walk",
                "clientSecret": "walk-secret",
            },
        ),
        201,
    )
    directory = await data(
        await owner_client.post(f"/api/v1/accounts/{account}/directories", json={"name": "W"}),
        201,
    )
    group_id = await db.fetch_val(
        "INSERT INTO directory_groups (directory_id, display_name, display_name_key, resource)"
        " VALUES (%(d)s, 'Walkers', 'walkers', '{}') RETURNING id",
        {"d": uuid.UUID(directory["id"])},
    )
    requester = await factory.user(account=False, password=None)
    join_id = await db.fetch_val(
        "INSERT INTO join_requests (account_id, user_id, domain)"
        " VALUES (%(a)s, %(u)s, 'walk.example') RETURNING id",
        {"a": account, "u": requester.id},
    )
    return Scene(
        values={
            "account": str(account),
            "target": str(target.id),
            "invitation": issued["invitation"]["id"],
            "join_request": str(join_id),
            "spare_key": "spare_key",
            "unused_key": "unused_key",
            "connection": connection["id"],
            "directory": directory["id"],
            "group": str(group_id),
        },
        owner_client=owner_client,
    )


async def snapshot(db: Any, account_id: str) -> list[Any]:
    """What a refused request could have changed about the account."""
    statements = [
        "SELECT name, deleted_at, require_mfa FROM accounts WHERE id = %(a)s",
        "SELECT user_id, role, revoked_at FROM memberships WHERE account_id = %(a)s"
        " ORDER BY user_id",
        "SELECT id, token_hash, revoked_at FROM invitations WHERE account_id = %(a)s ORDER BY id",
        "SELECT id, status FROM join_requests WHERE account_id = %(a)s ORDER BY id",
        "SELECT key, name, permissions FROM account_roles WHERE account_id = %(a)s ORDER BY key",
        "SELECT event_type, channel, enabled FROM notification_account_defaults"
        " WHERE account_id = %(a)s ORDER BY 1, 2",
        "SELECT count(*) FROM audit_log WHERE account_id = %(a)s",
        "SELECT id, enforce, default_role, updated_at FROM sso_connections WHERE account_id = %(a)s"
        " ORDER BY id",
        "SELECT id, name FROM directories WHERE account_id = %(a)s ORDER BY id",
        "SELECT count(*) FROM admin_portal_links WHERE account_id = %(a)s",
        "SELECT g.id, g.role FROM directory_groups g JOIN directories d ON d.id = g.directory_id"
        " WHERE d.account_id = %(a)s ORDER BY g.id",
    ]
    return [await db.fetch_all(sql, {"a": uuid.UUID(account_id)}) for sql in statements]


async def drive(
    case: Case, template: str, method: str, scene: Scene, client: Any, settings: Settings
) -> tuple[int, Any]:
    values = {name: scene.values[source] for name, source in case.path.items()}
    path = (case.url or template).format(**{**values, **scene.values})
    if case.form is None:
        body = {
            k: scene.values.get(v, v) if isinstance(v, str) else v
            for k, v in (case.json or {}).items()
        }
        response = await client.request(method, path, json=body if case.json else None)
        return response.status, await response.json()
    secret = "walk-" + uuid.uuid4().hex
    client.session.cookie_jar.update_cookies(
        {csrf.CSRF_COOKIE: secret}, response_url=client.make_url("/")
    )
    form = {k: scene.values.get(v, v) for k, v in case.form.items()}
    form["csrf"] = form_token(settings, secret, path)
    response = await client.request(method, path, data=form, allow_redirects=False)
    return response.status, await response.text()


async def member_with(
    scene: Scene, factory: Factory, login: Login, grants: list[str], key: str
) -> Any:
    account = scene.values["account"]
    body = {"key": key, "name": key, "permissions": grants}
    await data(await scene.owner_client.post(f"/api/v1/accounts/{account}/roles", json=body), 201)
    user = await factory.user(password=None)
    await factory.member(uuid.UUID(account), user.id, key)
    return await login(user, uuid.UUID(account))


@pytest.mark.parametrize("route", sorted(GUARDED), ids=lambda r: f"{r[0]} {r[1]}")
async def test_a_custom_role_is_refused_without_the_permission_and_served_with_it(
    route: tuple[str, str],
    scene: Scene,
    factory: Factory,
    login: Login,
    db: Any,
    settings: Settings,
) -> None:
    method, template = route
    case = GUARDED[route]
    others = sorted(set(permissions.TENANTD) - permissions.OWNER_ONLY - {case.permission})
    lacking = await member_with(scene, factory, login, others, "lacking")
    before = await snapshot(db, scene.values["account"])
    status, body = await drive(case, template, method, scene, lacking, settings)
    assert status == 403, (route, body)
    if isinstance(body, dict):
        assert body["error"]["code"] == "FORBIDDEN", body
    assert await snapshot(db, scene.values["account"]) == before

    if case.permission in permissions.OWNER_ONLY:
        everything = await member_with(scene, factory, login, ["*"], "everything")
        before = await snapshot(db, scene.values["account"])
        status, body = await drive(case, template, method, scene, everything, settings)
        assert status == 403, (route, body)
        assert await snapshot(db, scene.values["account"]) == before
        return
    holding = await member_with(scene, factory, login, [case.permission, *READING], "holding")
    status, body = await drive(case, template, method, scene, holding, settings)
    expected = case.ok if case.form is None else 303
    assert status in ((expected, 302) if case.form is not None else (expected,)), (route, body)
