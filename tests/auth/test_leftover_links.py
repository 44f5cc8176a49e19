"""Issue 25, items 5 and 12: a verification ends every outstanding link of the address, a
link never signs in past a second factor, and the names of the sign-up whose link was used
are the user's (and greet them), not a squatter's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenantd.db import Database
from tenantd.settings import Settings
from tests.auth.helpers import last_token, link_token, mail_sent, mails_to, register
from tests.factories import Factory, mail_text
from tests.helpers import data, error
from tests.mfa.helpers import claims, cookie, enrol_totp, signed_in
from tests.ui.test_mfa_pages import post_form

OWNER = "owner@corp.example"


async def test_a_second_link_of_the_same_sign_up_cannot_sign_in_a_totp_user_later(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    browser = await make_client()
    await register(browser, OWNER)
    first = last_token(mail_dir, OWNER)
    await browser.post("/api/v1/auth/resend-verification", json={"email": OWNER})
    await mail_sent(browser)
    # Jobs write the mails, so file order need not be send order: take the other link.
    [second] = {link_token(m, "/verify-email") for m in mails_to(mail_dir, OWNER)} - {first}
    await data(await browser.post("/auth/verify-email", json={"token": first}))
    await enrol_totp(browser)  # the owner adds a factor

    thief = await make_client()  # whoever reads the leftover mail, 48 h later
    await error(await thief.post("/auth/verify-email", json={"token": second}), 422)
    assert cookie(thief, "auth_token") is None
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 0


async def test_a_link_of_a_user_with_a_factor_answers_mfa_required(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user(verified=False, account=False, password=None)
    session = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(session)  # a factor, though the address is not verified yet
    await session.post("/api/v1/auth/resend-verification", json={"email": user.email})
    await mail_sent(session)
    token = last_token(mail_dir, user.email)

    browser = await make_client()
    answer = await data(await browser.post("/auth/verify-email", json={"token": token}))
    assert answer["mfaRequired"] is True and answer["ticket"]
    assert "totp" in answer["methods"]
    assert cookie(browser, "auth_token") is None  # no session on the link alone
    assert await db.fetch_val(
        "SELECT email_verified_at IS NOT NULL FROM users WHERE id = %(u)s", {"u": user.id}
    )
    finished = await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": answer["ticket"], "totp": enrolled.code(1)}
        )
    )
    assert finished["user"]["id"] == str(user.id)
    assert claims(browser)["amr"] == ["email", "otp"]


async def test_the_verify_page_sends_a_user_with_a_factor_to_the_mfa_step(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user(verified=False, account=False, password=None)
    session = await signed_in(make_client, db, settings, user)
    await enrol_totp(session)
    await session.post("/api/v1/auth/resend-verification", json={"email": user.email})
    await mail_sent(session)
    token = last_token(mail_dir, user.email)
    browser = await make_client()
    answer = await post_form(browser, f"/verify-email?token={token}", "/verify-email", token=token)
    assert answer.status == 303
    assert answer.headers["Location"].startswith("/login/mfa?ticket=")
    assert cookie(browser, "auth_token") is None
    assert cookie(browser, "mfa_binding")


async def test_the_names_of_the_sign_up_whose_link_was_used_win(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    squatter = await make_client()
    await register(squatter, OWNER, firstName="Mallory", lastName="Squat")
    owner = await make_client()
    await register(owner, OWNER, firstName="Olivia", lastName="Owner")
    owners_mail = mails_to(mail_dir, OWNER)[-1]
    assert "Hello Olivia," in mail_text(owners_mail)
    assert "Mallory" not in mail_text(owners_mail)

    # A resend carries the newest sign-up's names too.
    await owner.post("/api/v1/auth/resend-verification", json={"email": OWNER})
    await mail_sent(owner)
    resent = mails_to(mail_dir, OWNER)[-1]
    assert "Hello Olivia," in mail_text(resent)

    verified = await data(
        await owner.post("/auth/verify-email", json={"token": last_token(mail_dir, OWNER)})
    )
    assert (verified["user"]["firstName"], verified["user"]["lastName"]) == ("Olivia", "Owner")
    row = await db.fetch_one("SELECT first_name, last_name FROM users")
    assert row == {"first_name": "Olivia", "last_name": "Owner"}


async def test_the_squatters_link_used_names_the_user_after_its_own_sign_up(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    owner = await make_client()
    await register(owner, OWNER, firstName="Olivia", lastName="Owner")
    owners_token = last_token(mail_dir, OWNER)
    squatter = await make_client()
    await register(squatter, OWNER, firstName="Mallory", lastName="Squat")
    # The owner's own (earlier) link: the owner's names, though the squatter signed up last.
    await data(await owner.post("/auth/verify-email", json={"token": owners_token}))
    row = await db.fetch_one("SELECT first_name, last_name FROM users")
    assert row == {"first_name": "Olivia", "last_name": "Owner"}
