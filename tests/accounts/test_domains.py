"""Domain claiming (ACCOUNT_DOMAIN_CLAIMING) and join requests, end to end."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest

from tenantd.accounts.domains import PUBLIC_EMAIL_DOMAINS, claimable_domain
from tenantd.accounts.provisioning import provision_personal_account
from tenantd.settings import Settings
from tests.accounts.helpers import audit_actions
from tests.auth.helpers import mail_sent
from tests.factories import Factory, mail_text, read_mails
from tests.helpers import data, error

INTERFACE_LIST = """
gmail.com googlemail.com yahoo.com yahoo.co.uk yahoo.fr ymail.com outlook.com
hotmail.com hotmail.co.uk hotmail.fr live.com live.co.uk msn.com icloud.com
me.com mac.com aol.com proton.me protonmail.com pm.me gmx.com gmx.net gmx.de
web.de mail.com zoho.com yandex.com yandex.ru mail.ru qq.com 163.com 126.com
fastmail.com tutanota.com tuta.io hey.com comcast.net verizon.net att.net
sbcglobal.net bellsouth.net cox.net btinternet.com orange.fr free.fr
laposte.net t-online.de libero.it rediffmail.com naver.com hanmail.net
""".split()  # noqa: SIM905 (copied as INTERFACE.md prints it)


def test_exactly_the_51_public_domains() -> None:
    assert len(PUBLIC_EMAIL_DOMAINS) == 51
    assert set(INTERFACE_LIST) == PUBLIC_EMAIL_DOMAINS
    assert all(d == d.lower() for d in PUBLIC_EMAIL_DOMAINS)


def test_claimable_domain() -> None:
    assert claimable_domain("a@Acme.IO") == "acme.io"
    assert claimable_domain("a@GMAIL.com") is None
    assert claimable_domain("a@hotmail.co.uk") is None
    assert claimable_domain("no-at-sign") is None
    assert claimable_domain("a@localhost") is None
    assert claimable_domain("a@sub.gmail.com") == "sub.gmail.com"  # exact match only


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["ACCOUNT_DOMAIN_CLAIMING"] = "true"
    return env


async def verified_user(factory: Factory, email: str) -> Any:
    return await factory.user(email=email, account=False, password=None)


async def provision(db: Any, settings: Settings, user_id: uuid.UUID) -> Any:
    async with db.transaction() as conn:
        return await provision_personal_account(conn, settings, user_id=user_id)


async def test_first_signup_claims_later_one_gets_join_request(
    db: Any, settings: Settings, factory: Factory
) -> None:
    first = await verified_user(factory, "ann@acme.io")
    outcome = await provision(db, settings, first.id)
    assert outcome.created and outcome.conflict is None
    claim = await db.fetch_val(
        "SELECT claimed_domain FROM accounts WHERE id = %(a)s", {"a": outcome.account_id}
    )
    assert claim == "acme.io"

    second = await verified_user(factory, "Bob@ACME.io")
    conflict = await provision(db, settings, second.id)
    assert conflict.account_id is None and conflict.created is False
    assert conflict.conflict.account_id == outcome.account_id
    assert conflict.conflict.domain == "acme.io"
    row = await db.fetch_one(
        "SELECT account_id, user_id, domain, status FROM join_requests WHERE id = %(i)s",
        {"i": conflict.conflict.join_request_id},
    )
    assert row == {
        "account_id": outcome.account_id,
        "user_id": second.id,
        "domain": "acme.io",
        "status": "pending",
    }
    # No account and no membership for the second user.
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE user_id = %(u)s", {"u": second.id}
        )
        == 0
    )
    assert "join_request.created" in await audit_actions(db, outcome.account_id)
    # Provisioning again reuses the same pending request.
    again = await provision(db, settings, second.id)
    assert again.conflict.join_request_id == conflict.conflict.join_request_id
    assert await db.fetch_val("SELECT count(*) FROM join_requests") == 1


async def test_public_domains_never_claim(db: Any, settings: Settings, factory: Factory) -> None:
    for email in ("a@gmail.com", "b@GMAIL.com", "c@proton.me"):
        user = await verified_user(factory, email)
        outcome = await provision(db, settings, user.id)
        assert outcome.created and outcome.conflict is None
    assert await db.fetch_val("SELECT count(*) FROM accounts WHERE claimed_domain IS NOT NULL") == 0
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 3


async def test_existing_member_is_reused_not_claimed(
    db: Any, settings: Settings, factory: Factory
) -> None:
    user = await verified_user(factory, "x@reuse.io")
    first = await provision(db, settings, user.id)
    second = await provision(db, settings, user.id)
    assert (second.account_id, second.created) == (first.account_id, False)
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1


class TestClaimingOff:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["ACCOUNT_DOMAIN_CLAIMING"] = "false"
        return env

    async def test_flag_off_gives_everyone_a_personal_account(
        self, db: Any, settings: Settings, factory: Factory
    ) -> None:
        for email in ("a@same.io", "b@same.io"):
            user = await verified_user(factory, email)
            outcome = await provision(db, settings, user.id)
            assert outcome.created and outcome.conflict is None
        assert (
            await db.fetch_val("SELECT count(*) FROM accounts WHERE claimed_domain IS NOT NULL")
            == 0
        )
        assert await db.fetch_val("SELECT count(*) FROM join_requests") == 0


async def concurrent_provisionings(settings: Settings, user_ids: list[uuid.UUID]) -> list[Any]:
    """Each provisioning in its own transaction on its own connection, all at once."""
    from tenantd.db.core import create_database
    from tenantd.db.dsn import url_to_dsn

    pool = await create_database(
        url_to_dsn(settings.database.url or ""), minsize=1, maxsize=len(user_ids)
    )
    try:
        return list(await asyncio.gather(*(provision(pool, settings, u) for u in user_ids)))
    finally:
        await pool.close()


@pytest.mark.parametrize("claiming", ["true", "false"])
async def test_repeated_concurrent_provisioning_leaves_one_owner_membership(
    claiming: str, env: dict[str, str], db: Any, factory: Factory
) -> None:
    """Account state table, none -> active: repeated calls leave one active owner membership."""
    from tenantd.app.settings import load_settings

    env["ACCOUNT_DOMAIN_CLAIMING"] = claiming
    settings = load_settings(environ=env)
    user = await verified_user(factory, "solo@repeat.io")
    outcomes = await concurrent_provisionings(settings, [user.id] * 20)
    assert sum(o.created for o in outcomes) == 1
    assert {o.account_id for o in outcomes} == {outcomes[0].account_id}
    rows = await db.fetch_all(
        "SELECT account_id, role FROM memberships WHERE user_id = %(u)s AND revoked_at IS NULL",
        {"u": user.id},
    )
    assert rows == [{"account_id": outcomes[0].account_id, "role": "owner"}]
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1


async def test_soft_delete_releases_the_claim(
    db: Any, settings: Settings, factory: Factory, login: Any
) -> None:
    first = await verified_user(factory, "a@release.io")
    outcome = await provision(db, settings, first.id)
    client = await login(first, outcome.account_id)
    await data(await client.delete(f"/api/v1/accounts/{outcome.account_id}"))
    # The soft-deleted row keeps its domain as history; the claim index ignores it.
    assert (
        await db.fetch_val(
            "SELECT claimed_domain FROM accounts WHERE id = %(a)s", {"a": outcome.account_id}
        )
        == "release.io"
    )
    second = await verified_user(factory, "b@release.io")
    claimed = await provision(db, settings, second.id)
    assert claimed.created and claimed.conflict is None
    live = await db.fetch_all(
        "SELECT id FROM accounts WHERE claimed_domain = 'release.io' AND deleted_at IS NULL"
    )
    assert [row["id"] for row in live] == [claimed.account_id]


async def test_database_refuses_two_live_claims(db: Any, factory: Factory) -> None:
    import psycopg2

    await db.execute("INSERT INTO accounts (name, claimed_domain) VALUES ('a', 'dup.io')")
    with pytest.raises(psycopg2.IntegrityError, match="accounts_claimed_domain_live_key"):
        await db.execute("INSERT INTO accounts (name, claimed_domain) VALUES ('b', 'DUP.io')")


async def test_concurrent_first_signups_on_one_domain_make_one_claim(
    db: Any, settings: Settings, factory: Factory
) -> None:
    """24 distinct users of a brand-new domain verify at once: one claims, 23 get requests."""
    users = [await verified_user(factory, f"user{i}@race.io") for i in range(24)]
    outcomes = await concurrent_provisionings(settings, [u.id for u in users])
    created = [o for o in outcomes if o.created]
    conflicts = [o for o in outcomes if o.conflict is not None]
    assert len(created) == 1 and len(conflicts) == 23
    winner = created[0].account_id
    assert {c.conflict.account_id for c in conflicts} == {winner}
    assert (
        await db.fetch_val("SELECT count(*) FROM accounts WHERE lower(claimed_domain) = 'race.io'")
        == 1
    )
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM join_requests WHERE account_id = %(a)s AND status = 'pending'",
            {"a": winner},
        )
        == 23
    )
    assert await db.fetch_val("SELECT count(*) FROM memberships") == 1


# -- join requests over HTTP ---------------------------------------------------------------------


async def claimed_team(
    db: Any, settings: Settings, factory: Factory, login: Any, *, seats: int = 10
) -> tuple[Any, Any, uuid.UUID]:
    owner = await verified_user(factory, "owner@corp.io")
    outcome = await provision(db, settings, owner.id)
    await factory.set_plan(outcome.account_id, "team", seats=seats)
    return owner, await login(owner, outcome.account_id), outcome.account_id


async def test_join_requests_list_approve_deny(
    db: Any, settings: Settings, factory: Factory, login: Any
) -> None:
    owner, client, account_id = await claimed_team(db, settings, factory, login)
    one = await verified_user(factory, "one@corp.io")
    two = await verified_user(factory, "two@corp.io")
    req_one = (await provision(db, settings, one.id)).conflict.join_request_id
    req_two = (await provision(db, settings, two.id)).conflict.join_request_id
    base = f"/api/v1/accounts/{account_id}/join-requests"
    pending = await data(await client.get(base))
    assert [(p["id"], p["email"], p["status"]) for p in pending] == [
        (str(req_one), "one@corp.io", "pending"),
        (str(req_two), "two@corp.io", "pending"),
    ]
    approved = await data(await client.post(f"{base}/{req_one}/approve"))
    assert approved["joinRequest"]["status"] == "approved"
    assert approved["joinRequest"]["decidedBy"] == str(owner.id)
    assert approved["membership"]["userId"] == str(one.id)
    assert approved["membership"]["role"] == "member"
    denied = await data(await client.post(f"{base}/{req_two}/deny"))
    assert denied["joinRequest"]["status"] == "denied" and denied["membership"] is None
    assert await data(await client.get(base)) == []
    # Decided requests cannot be decided again.
    await error(await client.post(f"{base}/{req_one}/deny"), 409, "CONFLICT")
    await error(await client.post(f"{base}/{req_two}/approve"), 409, "CONFLICT")
    await error(await client.post(f"{base}/{uuid.uuid4()}/approve"), 404, "NOT_FOUND")
    # The approved user can now use the account.
    joined = await login(one)
    switched = await data(
        await joined.post("/api/v1/accounts/switch", json={"accountId": str(account_id)})
    )
    assert switched["role"] == "member"
    actions = await audit_actions(db, account_id)
    assert {"join_request.approved", "join_request.denied"} <= set(actions)


async def test_approval_respects_the_seat_cap(
    db: Any, settings: Settings, factory: Factory, login: Any
) -> None:
    _owner, client, account_id = await claimed_team(db, settings, factory, login, seats=1)
    late = await verified_user(factory, "late@corp.io")
    rid = (await provision(db, settings, late.id)).conflict.join_request_id
    base = f"/api/v1/accounts/{account_id}/join-requests"
    await error(await client.post(f"{base}/{rid}/approve"), 409, "SEAT_LIMIT_REACHED")
    assert (await data(await client.get(base)))[0]["status"] == "pending"
    await factory.set_plan(account_id, "team", seats=2)
    await data(await client.post(f"{base}/{rid}/approve"))


async def test_concurrent_approvals_never_exceed_the_seat_cap(
    db: Any, settings: Settings, factory: Factory, login: Any
) -> None:
    _owner, client, account_id = await claimed_team(db, settings, factory, login, seats=5)
    rids = []
    for i in range(20):
        user = await verified_user(factory, f"wave{i}@corp.io")
        rids.append((await provision(db, settings, user.id)).conflict.join_request_id)
    base = f"/api/v1/accounts/{account_id}/join-requests"
    responses = await asyncio.gather(*(client.post(f"{base}/{rid}/approve") for rid in rids))
    statuses = [r.status for r in responses]
    assert statuses.count(200) == 4 and statuses.count(409) == 16, statuses
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
            {"a": account_id},
        )
        == 5
    )


async def test_members_cannot_decide_join_requests(
    db: Any, settings: Settings, factory: Factory, login: Any
) -> None:
    _owner, _client, account_id = await claimed_team(db, settings, factory, login)
    plain = await verified_user(factory, "plain@corp.io")
    rid = (await provision(db, settings, plain.id)).conflict.join_request_id
    await factory.member(account_id, plain.id, "member")
    member_client = await login(plain, account_id)
    base = f"/api/v1/accounts/{account_id}/join-requests"
    await error(await member_client.get(base), 403, "FORBIDDEN")
    await error(await member_client.post(f"{base}/{rid}/approve"), 403, "FORBIDDEN")
    await error(await member_client.post(f"{base}/{rid}/deny"), 403, "FORBIDDEN")


async def test_verify_email_on_a_claimed_domain_end_to_end(
    client: Any, make_client: Any, db: Any, mail_dir: Any, login: Any, factory: Factory
) -> None:
    """Register + verify twice on one domain: the second gets 409 DOMAIN_CLAIMED, the owner an
    email, and the owner approves the request through the API."""

    async def register_and_verify(browser: Any, email: str) -> Any:
        response = await browser.post(
            "/auth/register", json={"email": email, "password": "a long password 123"}
        )
        assert response.status == 200, await response.text()
        mails = [m for m in read_mails(mail_dir) if m["To"] == email]
        token = re.search(r"verify-email\?token=([\w-]+)", mail_text(mails[-1]))
        assert token is not None
        return await browser.post("/auth/verify-email", json={"token": token.group(1)})

    first = await register_and_verify(client, "founder@startup.io")
    assert first.status == 200, await first.text()
    account_id = (await first.json())["data"]["account"]["id"]
    second_browser = await make_client()
    second = await register_and_verify(second_browser, "hire@startup.io")
    body = await second.json()
    assert second.status == 409, body
    assert body["error"]["code"] == "DOMAIN_CLAIMED"
    assert body["error"]["details"] == {"accountId": account_id, "domain": "startup.io"}
    await mail_sent(second_browser)  # the notices leave from jobs, after the commit
    notices = [m for m in read_mails(mail_dir) if m["To"] == "founder@startup.io"]
    assert any("hire@startup.io" in mail_text(m) for m in notices)
    # The committed join request is approved by the owner (who is on a plan with seats).
    await factory.set_plan(uuid.UUID(account_id), "team")
    pending = await data(await client.get(f"/api/v1/accounts/{account_id}/join-requests"))
    assert [p["email"] for p in pending] == ["hire@startup.io"]
    approved = await data(
        await client.post(f"/api/v1/accounts/{account_id}/join-requests/{pending[0]['id']}/approve")
    )
    assert approved["membership"]["role"] == "member"
