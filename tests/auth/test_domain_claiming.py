"""verify-email with ACCOUNT_DOMAIN_CLAIMING on, end to end through the real provisioning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.db import Database
from tests.auth.helpers import last_token, mail_sent, mails_to, register, set_cookies
from tests.factories import mail_text
from tests.helpers import error_of


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["ACCOUNT_DOMAIN_CLAIMING"] = "true"
    return env


async def verify(browser: Any, mail_dir: Path, email: str) -> Any:
    await register(browser, email)
    return await browser.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, email.lower())}
    )


async def test_second_signup_on_a_claimed_domain_gets_409_and_the_owner_is_told(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    first = await verify(await make_client(), mail_dir, "founder@acme-corp.io")
    first_body = await first.json()
    assert first.status == 200, first_body
    account_id = first_body["data"]["account"]["id"]

    second_browser = await make_client()
    second = await verify(second_browser, mail_dir, "hire@ACME-corp.io")
    body = await second.json()
    assert second.status == 409, body
    error = error_of(body)
    assert error["code"] == "DOMAIN_CLAIMED"
    assert error["details"] == {"accountId": account_id, "domain": "acme-corp.io"}
    assert set_cookies(second) == {}
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    request = await db.fetch_one("SELECT * FROM join_requests")
    assert request is not None
    assert str(request["account_id"]) == account_id and request["status"] == "pending"
    hire = await db.fetch_one("SELECT * FROM users WHERE lower(email) = 'hire@acme-corp.io'")
    assert hire is not None and hire["email_verified_at"] is not None
    await mail_sent(second_browser)  # the notices leave from jobs, after the commit
    (notice,) = [m for m in mails_to(mail_dir, "founder@acme-corp.io") if "join" in m["Subject"]]
    assert "hire@acme-corp.io" in mail_text(notice)

    # Signing in afterwards works; the user simply has no account yet.
    login = await second_browser.post(
        "/api/v1/auth/login",
        json={"email": "hire@acme-corp.io", "password": "a long enough passphrase"},
    )
    assert login.status == 200
    me = await (await second_browser.get("/api/v1/users/me")).json()
    assert me["account"] is None


async def test_public_domains_never_claim(make_client: Any, db: Database, mail_dir: Path) -> None:
    for email in ("one@gmail.com", "two@gmail.com"):
        response = await verify(await make_client(), mail_dir, email)
        assert response.status == 200
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 2
    assert await db.fetch_val("SELECT count(*) FROM accounts WHERE claimed_domain IS NOT NULL") == 0
