"""ACCOUNT_DOMAIN_CLAIMING: a signup refused with DOMAIN_CLAIMED cannot sidestep the claim by
creating its own account while its join request is pending, and is told (in the 409 and by
email) that its address is shown to the claiming account's owner and admins."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.auth.helpers import mail_sent
from tests.factories import Factory, mail_text, read_mails
from tests.helpers import data, error

PASSWORD = "a long enough passphrase"
TOKEN = re.compile(r"/verify-email\?token=([\w-]+)")
NOTICE = "shown to that account's owner and admins"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["ACCOUNT_DOMAIN_CLAIMING"] = "true"
    return env


def mails_to(mail_dir: Path, address: str) -> list[Any]:
    return [m for m in read_mails(mail_dir) if m["To"] == address]


async def register_and_verify(browser: Any, mail_dir: Path, email: str) -> Any:
    response = await browser.post("/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status == 200, await response.text()
    token = TOKEN.search(mail_text(mails_to(mail_dir, email)[-1]))
    assert token is not None
    return await browser.post("/auth/verify-email", json={"token": token.group(1)})


async def refused_signup(
    make_client: Any, mail_dir: Path, email: str = "hire@claimco.io"
) -> tuple[Any, Any, str]:
    """The founder claims claimco.io; `email` verifies and is refused. (founder, hire, id)."""
    founder = await make_client()
    first = await register_and_verify(founder, mail_dir, "founder@claimco.io")
    assert first.status == 200, await first.text()
    account_id = (await first.json())["data"]["account"]["id"]
    hire = await make_client()
    refused = await error(await register_and_verify(hire, mail_dir, email), 409, "DOMAIN_CLAIMED")
    assert refused["details"] == {"accountId": account_id, "domain": "claimco.io"}
    assert NOTICE in refused["message"]
    await mail_sent(hire)  # the notices leave from jobs, after the commit
    login = await hire.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert login.status == 200, await login.text()
    return founder, hire, account_id


async def test_refused_signup_is_told_its_address_is_shown_and_cannot_sidestep(
    make_client: Any, db: Any, mail_dir: Path
) -> None:
    _founder, hire, account_id = await refused_signup(make_client, mail_dir)
    # The owner's notice keeps the address: the owner must know who asks.
    owner_notices = [m for m in mails_to(mail_dir, "founder@claimco.io") if "join" in m["Subject"]]
    assert len(owner_notices) == 1 and "hire@claimco.io" in mail_text(owner_notices[0])
    # The requester is told by email, sent after the commit of the join request.
    (told,) = [m for m in mails_to(mail_dir, "hire@claimco.io") if "join" in m["Subject"]]
    assert NOTICE in " ".join(mail_text(told).split())
    assert "claimco.io" in told["Subject"]

    # While the request is pending, no separate account; repeated and concurrent tries alike.
    responses = await asyncio.gather(
        *(hire.post("/api/v1/accounts", json={"name": f"Side door {i}"}) for i in range(5))
    )
    for response in responses:
        refused = await error(response, 409, "DOMAIN_CLAIMED")
        assert refused["details"] == {"accountId": account_id, "domain": "claimco.io"}
        assert NOTICE in refused["message"]
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert await db.fetch_val("SELECT status FROM join_requests") == "pending"


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_after_a_decision_the_requester_may_create_accounts(
    make_client: Any, db: Any, mail_dir: Path, factory: Factory, decision: str
) -> None:
    founder, hire, account_id = await refused_signup(make_client, mail_dir)
    await factory.set_plan(uuid.UUID(account_id), "team")  # seats for an approval
    base = f"/api/v1/accounts/{account_id}/join-requests"
    (pending,) = await data(await founder.get(base))
    await data(await founder.post(f"{base}/{pending['id']}/{decision}"))
    created = await data(await hire.post("/api/v1/accounts", json={"name": "Own"}), 201)
    assert created["role"] == "owner" and created["claimedDomain"] is None
    # The claim stays with the founder's account.
    assert await db.fetch_val("SELECT count(*) FROM accounts WHERE claimed_domain IS NOT NULL") == 1


async def test_a_released_claim_no_longer_blocks(make_client: Any, db: Any, mail_dir: Path) -> None:
    founder, hire, account_id = await refused_signup(make_client, mail_dir)
    await data(await founder.delete(f"/api/v1/accounts/{account_id}"))
    await data(await hire.post("/api/v1/accounts", json={"name": "Own"}), 201)


async def test_other_users_create_accounts_as_before(
    make_client: Any, mail_dir: Path, factory: Factory, login: Any
) -> None:
    await refused_signup(make_client, mail_dir)
    # Same domain, no join request (e.g. a member invited in): creating accounts still works.
    colleague = await factory.user(email="colleague@claimco.io", password=None)
    await data(await (await login(colleague)).post("/api/v1/accounts", json={"name": "X"}), 201)
