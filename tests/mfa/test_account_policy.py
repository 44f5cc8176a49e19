"""Accounts that require MFA: a member without a factor cannot make the account active
(switch, refresh into it, invitation accept), is mailed when the policy is switched on, and
/me tells the client."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import CHANNEL
from tenantd.db import Database
from tenantd.pubsub.hub import PUBSUB
from tenantd.settings import Settings
from tests.factories import Factory, UserRecord, read_mails, wait_until_heard
from tests.helpers import data, error, eventually
from tests.mfa.helpers import claims, enrol_totp, password_step, signed_in
from tests.perf.test_cold_tokens import StatementCounter


async def _team(factory: Factory) -> tuple[UserRecord, UserRecord]:
    owner = await factory.user(plan="team")
    member = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id)
    return owner, member


async def _require(make_client: Any, db: Database, settings: Settings, owner: UserRecord) -> Any:
    """The owner (with a factor, in a session that used it) switches the policy on."""
    await enrol_totp(await signed_in(make_client, db, settings, owner))
    browser = await signed_in(make_client, db, settings, owner, amr=("pwd", "otp"))
    detail = await data(
        await browser.patch(f"/api/v1/accounts/{owner.account_id}", json={"requireMfa": True})
    )
    assert detail["requireMfa"] is True
    return browser


async def test_only_the_owner_sets_the_policy(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner, admin = await _team(factory)
    await db.execute("UPDATE memberships SET role = 'admin' WHERE user_id = %(u)s", {"u": admin.id})
    browser = await signed_in(make_client, db, settings, admin, account_id=owner.account_id)
    await error(
        await browser.patch(f"/api/v1/accounts/{owner.account_id}", json={"requireMfa": True}),
        403,
        "FORBIDDEN",
    )


async def test_member_without_factor_cannot_switch_into_the_account(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Any
) -> None:
    owner, member = await _team(factory)
    owner_browser = await _require(make_client, db, settings, owner)
    me = await (await owner_browser.get("/api/v1/users/me")).json()
    assert me["account"]["requireMfa"] is True

    # Members without a factor are mailed (the owner has one: not mailed).
    def notices() -> Any:
        return {m["To"] for m in read_mails(mail_dir) if "requires multi-factor" in m["Subject"]}

    assert await eventually(lambda: len(notices()) == 1)
    assert any(member.email in to for to in notices())

    browser = await signed_in(make_client, db, settings, member)  # in their own account
    switch = {"accountId": str(owner.account_id)}
    refused = await error(
        await browser.post("/api/v1/accounts/switch", json=switch), 403, "MFA_REQUIRED"
    )
    assert refused["details"]["accountId"] == str(owner.account_id)

    # With a factor, the switch needs a session that used it (issue 25 item 16): this one
    # signed in with a password only, so it steps up with the new factor first.
    enrolled = await enrol_totp(browser)
    refused = await error(
        await browser.post("/api/v1/accounts/switch", json=switch), 403, "REAUTH_REQUIRED"
    )
    assert refused["details"]["methods"] == ["totp"]
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    switched = await data(await browser.post("/api/v1/accounts/switch", json=switch))
    assert switched["account"]["id"] == str(owner.account_id)
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["account"]["requireMfa"] is True and me["user"]["mfaEnabled"] is True


async def test_refresh_into_the_account_is_refused_without_a_factor(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner, member = await _team(factory)
    # The member's session is in the team account before the policy is switched on.
    browser = await signed_in(make_client, db, settings, member, account_id=owner.account_id)
    await _require(make_client, db, settings, owner)
    await error(await browser.post("/api/v1/auth/refresh"), 403, "MFA_REQUIRED")
    # The refresh session was not consumed: once the member has a factor and the session
    # used it, it renews. (Enrolling needs an access token; the current one is still valid.)
    enrolled = await enrol_totp(browser)
    await error(await browser.post("/api/v1/auth/refresh"), 403, "MFA_REQUIRED")
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    await data(await browser.post("/api/v1/auth/refresh"))
    assert claims(browser)["aid"] == str(owner.account_id)


async def test_sign_in_lands_outside_the_account_without_a_factor(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner = await factory.user(plan="team")
    member = await factory.user(account=False)
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id)
    await _require(make_client, db, settings, owner)
    browser = await make_client()
    await data(
        await browser.post(
            "/api/v1/auth/login", json={"email": member.email, "password": member.password}
        )
    )
    assert claims(browser)["aid"] is None  # signed in, but the account is not active
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["user"]["mfaEnabled"] is False and me["account"] is None

    # After enrolling, the next sign-in (with its second factor) lands in the account.
    enrolled = await enrol_totp(browser)
    fresh = await make_client()
    ticket = (await password_step(fresh, member))["ticket"]
    await data(
        await fresh.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        )
    )
    assert claims(fresh)["aid"] == str(owner.account_id)


async def test_invitation_accept_without_a_factor_is_refused_and_stays_pending(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner = await factory.user(plan="team")
    invitee = await factory.user()
    owner_browser = await _require(make_client, db, settings, owner)
    issued = await data(
        await owner_browser.post(
            f"/api/v1/accounts/{owner.account_id}/invitations",
            json={"email": invitee.email, "role": "member"},
        ),
        201,
    )
    browser = await signed_in(make_client, db, settings, invitee)
    await error(
        await browser.post("/api/v1/invitations/accept", json={"token": issued["token"]}),
        403,
        "MFA_REQUIRED",
    )
    enrolled = await enrol_totp(browser)
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    accepted = await data(
        await browser.post("/api/v1/invitations/accept", json={"token": issued["token"]})
    )
    assert accepted["account"]["id"] == str(owner.account_id)


async def test_switching_the_policy_off(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner, member = await _team(factory)
    owner_browser = await _require(make_client, db, settings, owner)
    detail = await data(
        await owner_browser.patch(
            f"/api/v1/accounts/{owner.account_id}", json={"requireMfa": False}
        )
    )
    assert detail["requireMfa"] is False
    browser = await signed_in(make_client, db, settings, member)
    await data(
        await browser.post("/api/v1/accounts/switch", json={"accountId": str(owner.account_id)})
    )


async def test_a_session_that_used_no_factor_is_refused_in_the_account(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    """requireMfa looks at the session, not only the user (issue 25 item 16): a member who has
    a factor but whose session signed in without it (amr pwd, fed, ...) is refused until
    it steps up with the factor."""
    owner, member = await _team(factory)
    enrolled = await enrol_totp(await signed_in(make_client, db, settings, member))
    await _require(make_client, db, settings, owner)
    switch = {"accountId": str(owner.account_id)}
    for amr in (("pwd",), ("fed",)):
        browser = await signed_in(make_client, db, settings, member, amr=amr)
        await error(
            await browser.post("/api/v1/accounts/switch", json=switch), 403, "REAUTH_REQUIRED"
        )
    # A session already in the account without a factor: its refresh is refused.
    inside = await signed_in(
        make_client, db, settings, member, account_id=owner.account_id, amr=("pwd",)
    )
    await error(await inside.post("/api/v1/auth/refresh"), 403, "MFA_REQUIRED")
    # A session that used the factor is served.
    factored = await signed_in(make_client, db, settings, member, amr=("pwd", "otp"))
    await data(await factored.post("/api/v1/accounts/switch", json=switch))
    await data(await factored.post("/api/v1/auth/refresh"))
    assert claims(factored)["aid"] == str(owner.account_id)
    # Stepping up with the factor opens it to the password-only session.
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    await data(await browser.post("/api/v1/accounts/switch", json=switch))


async def test_a_token_issued_before_the_policy_is_refused_at_its_next_request(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    app: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An access token already in the account when the owner switches requireMfa on is not
    served until it expires (issue 25 item 16): its next request is refused, from the
    cached context (no statement per request), while the routes that step up, enrol a
    factor or leave still answer; stepping up with the factor opens the account again."""
    owner, member = await _team(factory)
    bare = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, bare.id)
    enrolled = await enrol_totp(await signed_in(make_client, db, settings, member))
    members = f"/api/v1/accounts/{owner.account_id}/members"
    inside = await signed_in(make_client, db, settings, member, account_id=owner.account_id)
    without = await signed_in(make_client, db, settings, bare, account_id=owner.account_id)
    factored = await signed_in(
        make_client, db, settings, member, account_id=owner.account_id, amr=("pwd", "otp")
    )
    cache = app[DOMAINS].identity.principal_cache
    for browser in (inside, without, factored):
        await data(await browser.get(members))
        assert cache.principal(uuid.UUID(claims(browser)["jti"])) is not None  # cached

    await _require(make_client, db, settings, owner)
    await wait_until_heard(db, app[PUBSUB], CHANNEL)  # the account's invalidation arrived
    counter = StatementCounter(monkeypatch)
    refused = await error(await inside.get(members), 403, "REAUTH_REQUIRED")
    assert refused["details"]["methods"] == ["totp"]
    await error(await without.get(members), 403, "MFA_REQUIRED")
    await error(await without.get(f"/api/v1/accounts/{owner.account_id}"), 403, "MFA_REQUIRED")
    await data(await factored.get(members))  # a session that used its factor is served
    calls = counter.calls
    for _ in range(3):  # the hot path answers from the cached context: no new statement
        await error(await inside.get(members), 403, "REAUTH_REQUIRED")
        assert (await inside.get("/api/v1/users/me")).status == 200  # tells the state
    assert counter.calls == calls

    # Stepping up with the factor (an exempt route) opens the account to that session.
    await data(await inside.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    await data(await inside.get(members))
    # The member without a factor can still leave: switch back to their own account.
    await data(
        await without.post("/api/v1/accounts/switch", json={"accountId": str(bare.account_id)})
    )
    await data(await without.get(f"/api/v1/accounts/{bare.account_id}/members"))


async def test_the_owner_switches_it_on_only_from_a_session_that_used_a_factor(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    """Switching requireMfa on refuses every session in the account that used no factor from
    its next request on: the owner's own such session may not switch it on (it would lock
    the owner out of the account, and out of switching it off)."""
    owner = await factory.user()
    account = f"/api/v1/accounts/{owner.account_id}"
    browser = await signed_in(make_client, db, settings, owner)
    await error(await browser.patch(account, json={"requireMfa": True}), 403, "MFA_REQUIRED")
    enrolled = await enrol_totp(browser)
    refused = await error(
        await browser.patch(account, json={"requireMfa": True}), 403, "REAUTH_REQUIRED"
    )
    assert refused["details"]["methods"] == ["totp"]
    required = await db.fetch_val(
        "SELECT require_mfa FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
    )
    assert required is False
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    assert (await data(await browser.patch(account, json={"requireMfa": True})))["requireMfa"]
    assert (await data(await browser.patch(account, json={"requireMfa": False}))) is not None
