"""The "new sign-in" mail: sent once per browser never seen for the user (the device_id
cookie), never for the sign-up's own sign-in, not when NEW_SIGNIN_EMAIL=false, and never to a
suppressed address."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import pytest

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tests.auth.helpers import PASSWORD, mails_to, set_cookies, signed_up
from tests.factories import mail_text
from tests.helpers import ORIGIN

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/120.0.0.0 Safari/537.36"
)
FIREFOX = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
SUBJECT = "New sign-in to your account"


@pytest.fixture
def new_signin_email() -> str | None:
    return None


@pytest.fixture
def env(env: dict[str, str], new_signin_email: str | None) -> dict[str, str]:
    if new_signin_email is not None:
        env["NEW_SIGNIN_EMAIL"] = new_signin_email
    return env


async def login(browser: Any, email: str, agent: str = CHROME) -> Any:
    response = await browser.post(
        "/api/v1/auth/login",
        json={"email": email, "password": PASSWORD},
        headers={"User-Agent": agent},
    )
    assert response.status == 200, await response.text()
    await browser.server.app[DOMAINS].jobs.drain(10)  # the mail leaves after commit
    return response


def new_signin_mails(mail_dir: Path, email: str) -> list[Any]:
    return [m for m in mails_to(mail_dir, email) if m["Subject"] == SUBJECT]


async def test_sign_up_then_new_browsers_mail_once_each(make_client: Any, mail_dir: Path) -> None:
    email = "ada@example.com"
    first, _ = await signed_up(make_client, mail_dir, email)
    await first.server.app[DOMAINS].jobs.drain(10)
    assert new_signin_mails(mail_dir, email) == []  # the sign-up's own browser
    await login(first, email)
    assert new_signin_mails(mail_dir, email) == []  # seen: it has the device cookie

    second = await make_client()
    response = await login(second, email, FIREFOX)
    cookie = set_cookies(response)["device_id"]
    assert cookie["httponly"] == "" and cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) > 300 * 24 * 3600
    [mail] = new_signin_mails(mail_dir, email)
    text = mail_text(mail)
    assert "Firefox 121 on Ubuntu" in text
    assert "127.0.0.1" in text
    assert "UTC" in text
    assert f"{ORIGIN}/account" in text
    assert "password" in text  # signed in with

    await login(second, email, FIREFOX)  # the same browser again: nothing new
    await login(first, email)
    assert len(new_signin_mails(mail_dir, email)) == 1

    third = await make_client()
    await login(third, email, CHROME)  # same browser and OS as the first, another browser
    assert len(new_signin_mails(mail_dir, email)) == 2


async def test_a_device_cookie_of_another_user_does_not_count(
    make_client: Any, mail_dir: Path, factory: Any
) -> None:
    alice = await factory.user(email="alice@example.com", password=PASSWORD)
    bob = await factory.user(email="bob@example.com", password=PASSWORD)
    await login(await make_client(), alice.email)  # alice's first browser
    shared = await make_client()
    await login(shared, bob.email)  # bob's first browser: no mail to him
    await login(shared, alice.email)  # new for alice, though bob's cookie is there
    assert len(new_signin_mails(mail_dir, alice.email)) == 1
    assert new_signin_mails(mail_dir, bob.email) == []
    # A forged or malformed cookie is just "no cookie".
    forged = await make_client(cookies={"device_id": "x" * 43})
    await login(forged, bob.email)
    assert len(new_signin_mails(mail_dir, bob.email)) == 1


@pytest.mark.parametrize("new_signin_email", ["false"])
async def test_switched_off(make_client: Any, mail_dir: Path, factory: Any) -> None:
    user = await factory.user(password=PASSWORD)
    await login(await make_client(), user.email)
    await login(await make_client(), user.email, FIREFOX)
    assert new_signin_mails(mail_dir, user.email) == []


async def test_a_suppressed_address_is_not_mailed(
    make_client: Any, mail_dir: Path, factory: Any, db: Database
) -> None:
    user = await factory.user(password=PASSWORD)
    await login(await make_client(), user.email)
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider) VALUES (%(e)s, 'hard_bounce',"
        " 'resend')",
        {"e": user.email},
    )
    await login(await make_client(), user.email, FIREFOX)
    assert new_signin_mails(mail_dir, user.email) == []
    # The sign-in itself is recorded, and the browser is known from now on.
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM known_devices WHERE user_id = %(u)s", {"u": user.id}
        )
        == 2
    )


async def test_concurrent_sign_ins_from_one_new_browser_mail_once(
    make_client: Any, mail_dir: Path, factory: Any
) -> None:
    user = await factory.user(password=PASSWORD)
    await login(await make_client(), user.email)
    device = secrets.token_urlsafe(32)  # one browser, never seen, signing in in two tabs
    tabs = [await make_client(cookies={"device_id": device}) for _ in range(4)]
    await asyncio.gather(*(login(tab, user.email, FIREFOX) for tab in tabs))
    assert len(new_signin_mails(mail_dir, user.email)) == 1
