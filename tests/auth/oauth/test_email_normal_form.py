"""The OpenID Connect path normalises the provider's email exactly like the API: a trailing dot,
capitals or an IDN domain from the provider is the same user and the same domain claim."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tenantd.db import Database
from tests.auth.helpers import mail_sent
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import Browser, login_error
from tests.factories import mail_text, read_mails

PASSWORD = "a long enough passphrase"
TOKEN = re.compile(r"/verify-email\?token=([\w-]+)")


async def register_and_verify(browser: Browser, mail_dir: Any, email: str, stored: str) -> str:
    client = browser.client
    response = await client.post("/auth/register", json={"email": email, "password": PASSWORD})
    assert response.status == 200, await response.text()
    (message,) = [m for m in read_mails(mail_dir) if m["To"] == stored]
    token = TOKEN.search(mail_text(message))
    assert token is not None
    verified = await client.post("/auth/verify-email", json={"token": token.group(1)})
    body = await verified.json()
    assert verified.status == 200, body
    user_id: str = body["data"]["user"]["id"]
    return user_id


@pytest.mark.oauth_env(ACCOUNT_DOMAIN_CLAIMING="true")
@pytest.mark.parametrize(
    ("registered", "from_idp"),
    [
        ("alice@xn--exmple-cua.com", "Alice@Exämple.com."),
        ("Alice@EXÄMPLE.com", "alice@xn--exmple-cua.com"),
        ("alice@exämple.com", "ALICE@XN--EXMPLE-CUA.COM."),
    ],
)
async def test_provider_spelling_lands_on_the_registered_user_and_makes_no_second_claim(
    browser: Browser,
    new_browser: Any,
    idp: FakeIdP,
    db: Database,
    mail_dir: Any,
    registered: str,
    from_idp: str,
) -> None:
    user_id = await register_and_verify(browser, mail_dir, registered, "alice@xn--exmple-cua.com")
    claims = await db.fetch_all("SELECT id, claimed_domain FROM accounts")
    assert [c["claimed_domain"] for c in claims] == ["xn--exmple-cua.com"]

    idp.user = FakeUser(sub="alice-at-idp", email=from_idp)
    other_browser: Browser = await new_browser()
    response = await other_browser.sign_in()
    assert response.status == 302 and response.headers["Location"] == "/", response.headers
    me = await other_browser.me()
    assert me["user"]["id"] == user_id
    assert me["account"]["id"] == str(claims[0]["id"])
    assert await db.fetch_val("SELECT count(*) FROM users") == 1
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert await db.fetch_val("SELECT count(*) FROM join_requests") == 0
    assert await db.fetch_val("SELECT email FROM user_identities") == "alice@xn--exmple-cua.com"


@pytest.mark.oauth_env(ACCOUNT_DOMAIN_CLAIMING="true")
async def test_a_new_provider_user_on_a_claimed_idn_domain_is_a_join_request(
    browser: Browser, new_browser: Any, idp: FakeIdP, db: Database, mail_dir: Any
) -> None:
    await register_and_verify(browser, mail_dir, "owner@exämple.com", "owner@xn--exmple-cua.com")
    idp.user = FakeUser(sub="bob-at-idp", email="Bob@EXÄMPLE.com.")
    other_browser: Browser = await new_browser()
    assert login_error(await other_browser.sign_in())["error"] == "domain_claimed"
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    request = await db.fetch_one("SELECT domain, status FROM join_requests")
    assert request == {"domain": "xn--exmple-cua.com", "status": "pending"}
    # The requester is told that its address is shown to the owner and admins (a job after
    # the commit sends it).
    await mail_sent(other_browser.client)
    (told,) = [m for m in read_mails(mail_dir) if m["To"] == "bob@xn--exmple-cua.com"]
    assert "shown to that account's owner and admins" in " ".join(mail_text(told).split())


@pytest.mark.parametrize(
    "email",
    [
        "a@ex\u200dample.com",
        "a@xn--zz.example",
        "@exämple.com",
        # Not one mailbox (issue 25): a list, a display name, an address literal.
        "a@evil.example,b@corp.example",
        "x<v@corp.example>",
        "a@[127.0.0.1]",
    ],
)
async def test_a_provider_email_without_a_normal_form_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, email: str
) -> None:
    idp.user = FakeUser(sub="odd", email=email)
    assert login_error(await browser.sign_in())["error"] == "email_missing"
    assert browser.cookie("auth_token") is None
    assert await db.fetch_val("SELECT count(*) FROM users") == 0
