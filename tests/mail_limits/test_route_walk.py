"""Every route of the API router and of the hosted pages that reaches an action mailing an
address its caller chooses (`tenantd.app.mail_actions.MAIL_ACTIONS`, and the anonymous
sign-up, resend and reset of `ANONYMOUS_MAIL_ACTIONS`) is limited: the walk
finds the routes (tests/mail_limits/reach.py), and each found route is driven past the limit
and must refuse (API: 429 RATE_LIMITED; page: 429 in words; both with Retry-After) with no mail
beyond it. A new route reaching such an action without a driver here fails the walk; an
action whose limit is removed fails it too (the last test removes each in turn)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tenantd.accounts import queries as account_queries
from tenantd.app.mail_actions import ANONYMOUS_MAIL_ACTIONS, MAIL_ACTIONS
from tenantd.bundle import DOMAINS
from tenantd.ops.config import DEFAULT_RATE_LIMITS, MAIL_RATE_LIMITS
from tenantd.settings import Settings
from tenantd.web.routing import ROUTE_SPEC
from tests.factories import Factory, UserRecord, read_mails
from tests.helpers import PASSWORD
from tests.mail_limits.reach import reached_by
from tests.mfa.helpers import signed_in
from tests.ui.test_mfa_pages import token_in


@dataclass
class Ctx:
    make_client: Any
    factory: Factory
    db: Any
    settings: Settings
    mail_dir: Path
    app: web.Application

    async def browser(self, user: UserRecord) -> Any:
        return await signed_in(self.make_client, self.db, self.settings, user)

    async def drained(self) -> None:
        await self.app[DOMAINS].jobs.drain(10)

    def mails_to(self, address: str) -> int:
        return sum(1 for m in read_mails(self.mail_dir) if m["To"] == address)


def fresh(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}@third-party.example"


async def post_page(client: Any, page_path: str, action: str, **fields: str) -> Any:
    html = await (await client.get(page_path)).text()
    return await client.post(
        action, data={"csrf": token_in(html, action), **fields}, allow_redirects=False
    )


async def refused_api(response: Any) -> None:
    assert response.status == 429, (response.status, await response.text())
    assert (await response.json())["error"]["code"] == "RATE_LIMITED"
    assert int(response.headers["Retry-After"]) > 0


async def refused_page(response: Any) -> None:
    assert response.status == 429, (response.status, (await response.text())[:500])
    assert int(response.headers["Retry-After"]) > 0  # the page says when, as the API does


# -- drivers: one per route that reaches a mail action ----------------------------------------


async def api_email_change(ctx: Ctx) -> None:
    user = await ctx.factory.user(password=None)
    client = await ctx.browser(user)
    victim = fresh("victim")
    for _ in range(2):
        answer = await client.post("/api/v1/users/me/email", json={"newEmail": victim})
        assert answer.status == 202, await answer.text()
    await refused_api(await client.post("/api/v1/users/me/email", json={"newEmail": victim}))
    await ctx.drained()
    assert ctx.mails_to(victim) == 2


async def page_email_change(ctx: Ctx) -> None:
    user = await ctx.factory.user(password=None)
    client = await ctx.browser(user)
    victim = fresh("victim")
    for _ in range(2):
        answer = await post_page(client, "/account", "/account/email", newEmail=victim)
        assert answer.status == 303, (await answer.text())[:500]
    await refused_page(await post_page(client, "/account", "/account/email", newEmail=victim))
    await ctx.drained()
    assert ctx.mails_to(victim) == 2


async def _owner(ctx: Ctx) -> tuple[UserRecord, Any]:
    owner = await ctx.factory.user(plan="team", password=None)
    return owner, await ctx.browser(owner)


async def api_invite(ctx: Ctx) -> None:
    owner, client = await _owner(ctx)
    path = f"/api/v1/accounts/{owner.account_id}/invitations"
    invitees = [fresh("invitee") for _ in range(4)]
    for invitee in invitees[:3]:  # per inviter: 3
        answer = await client.post(path, json={"email": invitee, "role": "member"})
        assert answer.status == 201, await answer.text()
    await refused_api(await client.post(path, json={"email": invitees[3], "role": "member"}))
    await ctx.drained()
    assert ctx.mails_to(invitees[3]) == 0


async def _invitation(ctx: Ctx, owner: UserRecord, invitee: str) -> uuid.UUID:
    """A pending invitation written directly (no action, so no mail and nothing counted)."""
    assert owner.account_id is not None
    async with ctx.db.connection() as conn:
        row = await account_queries.insert_invitation(
            conn,
            account_id=owner.account_id,
            email=invitee,
            role="member",
            token_hash=uuid.uuid4().bytes,
            invited_by=owner.id,
            ttl_hours=24,
        )
    return uuid.UUID(str(row["id"]))


async def api_resend(ctx: Ctx) -> None:
    owner, client = await _owner(ctx)
    invitee = fresh("invitee")
    invitation = await _invitation(ctx, owner, invitee)
    resend = f"/api/v1/accounts/{owner.account_id}/invitations/{invitation}/resend"
    for _ in range(2):  # per invitee: 2
        answer = await client.post(resend)
        assert answer.status == 200, await answer.text()
    await refused_api(await client.post(resend))
    await ctx.drained()
    assert ctx.mails_to(invitee) == 2


async def page_invite(ctx: Ctx) -> None:
    owner, client = await _owner(ctx)
    members = f"/accounts/{owner.account_id}/members"
    invitees = [fresh("invitee") for _ in range(4)]
    for invitee in invitees[:3]:
        answer = await post_page(client, members, members + "/invite", email=invitee)
        assert answer.status == 303, (await answer.text())[:500]
    await refused_page(await post_page(client, members, members + "/invite", email=invitees[3]))
    await ctx.drained()
    assert ctx.mails_to(invitees[3]) == 0


async def page_resend(ctx: Ctx) -> None:
    owner, client = await _owner(ctx)
    invitee = fresh("invitee")
    invitation = await _invitation(ctx, owner, invitee)
    members = f"/accounts/{owner.account_id}/members"
    action = f"/accounts/{owner.account_id}/invitations/{invitation}/resend"
    for _ in range(2):
        answer = await post_page(client, members, action)
        assert answer.status == 303, (await answer.text())[:500]
    await refused_page(await post_page(client, members, action))
    await ctx.drained()
    assert ctx.mails_to(invitee) == 2


async def _anonymous(
    ctx: Ctx, send: Callable[[Any, str], Awaitable[Any]], accepted: int, refuse: Any
) -> None:
    """Three sends to one address from one browser: the third is refused (per address: 2)."""
    browser = await ctx.make_client()
    address = fresh("typed")
    for _ in range(2):
        answer = await send(browser, address)
        assert answer.status == accepted, (answer.status, (await answer.text())[:300])
    await refuse(await send(browser, address))
    await ctx.drained()
    assert ctx.mails_to(address) <= 2


async def api_register(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await browser.post("/auth/register", json={"email": address, "password": PASSWORD})

    await _anonymous(ctx, send, 200, refused_api)


async def page_signup(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await post_page(browser, "/signup", "/signup", email=address, password=PASSWORD)

    await _anonymous(ctx, send, 303, refused_page)


async def api_resend_verification(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await browser.post("/api/v1/auth/resend-verification", json={"email": address})

    await _anonymous(ctx, send, 200, refused_api)


async def page_check_inbox(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await post_page(browser, "/check-inbox?email=x", "/check-inbox", email=address)

    await _anonymous(ctx, send, 303, refused_page)


async def api_password_reset(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await browser.post("/api/v1/auth/password-reset/request", json={"email": address})

    await _anonymous(ctx, send, 200, refused_api)


async def page_password_reset(ctx: Ctx) -> None:
    async def send(browser: Any, address: str) -> Any:
        return await post_page(browser, "/reset-password", "/reset-password", email=address)

    await _anonymous(ctx, send, 303, refused_page)


Driver = Callable[[Ctx], Awaitable[None]]
DRIVERS: dict[str, Driver] = {
    "POST /api/v1/users/me/email": api_email_change,
    "POST /account/email": page_email_change,
    "POST /api/v1/accounts/{id}/invitations": api_invite,
    "POST /api/v1/accounts/{id}/invitations/{iid}/resend": api_resend,
    "POST /accounts/{id}/members/invite": page_invite,
    "POST /accounts/{id}/invitations/{iid}/resend": page_resend,
    "POST /auth/register": api_register,
    "POST /signup": page_signup,
    "POST /api/v1/auth/resend-verification": api_resend_verification,
    "POST /check-inbox": page_check_inbox,
    "POST /api/v1/auth/password-reset/request": api_password_reset,
    "POST /reset-password": page_password_reset,
}
ALL_ACTIONS = {**MAIL_ACTIONS, **ANONYMOUS_MAIL_ACTIONS}


# The operator's routes (an API key with `users:manage`): they mail a user at the address the
# user already has, never one the caller chooses, and are not limited as a user's are.
OPERATOR_ROUTES = {"POST /api/v1/admin/users/{id}/resend-verification"}


def reaching_routes(app: web.Application) -> dict[str, set[Any]]:
    """Route ('METHOD /path') -> the mail actions it may reach, over every route of the app
    (the one table's API routes and hosted pages), the operator's routes aside."""
    targets = {action for actions in ALL_ACTIONS.values() for action in actions}
    routes = [
        r
        for r in app.router.routes()
        if r.method != "HEAD" and f"{r.method} {r.resource.canonical}" not in OPERATOR_ROUTES  # type: ignore[union-attr]
    ]
    found: dict[str, set[Any]] = {}
    walked = reached_by([r.handler for r in routes], targets)
    for route, actions in zip(routes, walked, strict=True):
        if actions:
            found[f"{route.method} {route.resource.canonical}"] = actions  # type: ignore[union-attr]
    return found


async def walk(ctx: Ctx, only: set[str] | None = None) -> list[str]:
    """Drive every route that reaches a mail action (of `only`, when given) past its limit;
    what failed, in words."""
    failures = []
    for name, actions in sorted(reaching_routes(ctx.app).items()):
        if only is not None and name not in only:
            continue
        driver = DRIVERS.get(name)
        if driver is None:
            names = sorted(action.__name__ for action in actions)
            failures.append(f"{name} reaches {names}: add a driver that crosses its limit")
            continue
        try:
            await driver(ctx)
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
    return failures


@pytest.fixture
def ctx(
    make_client: Any, factory: Factory, db: Any, settings: Settings, mail_dir: Path, app: Any
) -> Ctx:
    return Ctx(make_client, factory, db, settings, mail_dir, app)


def test_the_operator_routes_set_aside_need_the_operators_scope(ctx: Ctx) -> None:
    specs = {spec.name: spec for spec in ctx.app[ROUTE_SPEC]}
    for name in OPERATOR_ROUTES:
        assert specs[name].scope == "users:manage", name


def test_the_list_names_every_limited_scope_and_each_action_once() -> None:
    assert set(MAIL_ACTIONS) == set(MAIL_RATE_LIMITS)
    assert set(ANONYMOUS_MAIL_ACTIONS) <= set(DEFAULT_RATE_LIMITS)
    actions = [action for group in ALL_ACTIONS.values() for action in group]
    assert len(actions) == len(set(actions))


async def test_every_route_reaching_a_mail_action_is_limited(ctx: Ctx) -> None:
    reaching = reaching_routes(ctx.app)
    api = {spec.name for spec in ctx.app[ROUTE_SPEC] if not spec.page}
    # The whole table is walked: each action is reached from the API and from a page.
    for group in ALL_ACTIONS.values():
        for action in group:
            routes = {name for name, found in reaching.items() if action in found}
            assert routes & api, (action.__name__, routes)
            assert routes - api, (action.__name__, routes)
    assert await walk(ctx) == []


ACTIONS = [action for group in MAIL_ACTIONS.values() for action in group]


@pytest.mark.parametrize("action", ACTIONS, ids=[a.__qualname__ for a in ACTIONS])
async def test_the_walk_fails_when_one_action_loses_its_limit(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch, action: Any
) -> None:
    """Remove the limit from this action only (the limiter does nothing while the action is
    on the stack): every route reaching it fails the walk, the others still pass."""
    module = sys.modules[action.__module__]
    limiter = module.limit_chosen_recipient
    code = action.__wrapped__.__code__ if hasattr(action, "__wrapped__") else action.__code__

    async def without_this_action(*args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is code:
                return None
            frame = frame.f_back  # type: ignore[assignment]
        return await limiter(*args, **kwargs)

    monkeypatch.setattr(module, "limit_chosen_recipient", without_this_action)
    reaching = reaching_routes(ctx.app)
    expected = {name for name, found in reaching.items() if action in found}
    failures = await walk(ctx)
    failed = {failure.split(":")[0] for failure in failures}
    assert failed == expected, failures


ANONYMOUS = [
    (door, scope)
    for door in ("tenantd.web.routing", "tenantd.ui.auth_pages")
    for scope in ANONYMOUS_MAIL_ACTIONS
]


@pytest.mark.parametrize("door, scope", ANONYMOUS, ids=[f"{d}:{s}" for d, s in ANONYMOUS])
async def test_the_walk_fails_when_an_anonymous_route_loses_its_limit(
    ctx: Ctx, monkeypatch: pytest.MonkeyPatch, door: str, scope: str
) -> None:
    """The anonymous ones are counted by the API router and by the pages: remove one scope's
    count from one of them, and exactly the routes of that scope behind it fail the walk."""
    module = sys.modules[door]
    counted = module.rate_limit_request

    async def without_this_scope(request: Any, name: str, *args: Any, **kwargs: Any) -> None:
        if name != scope:
            await counted(request, name, *args, **kwargs)

    monkeypatch.setattr(module, "rate_limit_request", without_this_scope)
    api = {spec.name for spec in ctx.app[ROUTE_SPEC] if not spec.page}
    actions = set(ANONYMOUS_MAIL_ACTIONS[scope])
    routes = {name for name, found in reaching_routes(ctx.app).items() if found & actions}
    expected = routes & api if door == "tenantd.web.routing" else routes - api
    assert expected
    failures = await walk(ctx, only=routes)
    assert {failure.split(":")[0] for failure in failures} == expected, failures
