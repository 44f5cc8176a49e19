"""The two-factor pages over plain HTTP (the no-JavaScript path): the second step of a
password sign-in, TOTP enrolment and removal on /account with the "confirm it's you" step-up,
the email-change links, and the account's MFA requirement on the members page."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyotp

from tenantd.mfa import queries as mfa_queries
from tests.auth.helpers import mail_sent
from tests.auth.test_email_change import link_token, mails_to, user_email
from tests.factories import Factory, UserRecord
from tests.mfa.helpers import claims, cookie, signed_in, user_with_totp


def token_in(page: str, action: str) -> str:
    """The CSRF token of the form posting to `action` in this page's HTML."""
    found = re.search(
        rf'action="{re.escape(action)}"[^>]*>\s*<input type="hidden" name="csrf"'
        r' value="([0-9a-f]+)"',
        page,
    )
    assert found, (action, page[:3000])
    return found.group(1)


async def post_form(client: Any, page_path: str, action: str, **fields: str) -> Any:
    page = await (await client.get(page_path)).text()
    return await client.post(
        action, data={"csrf": token_in(page, action), **fields}, allow_redirects=False
    )


def alert(page: str) -> str:
    found = re.search(r'data-testid="error">([^<]*)<', page)
    return html.unescape(found.group(1)) if found else ""


async def password_on_the_page(client: Any, user: UserRecord, next_path: str = "") -> str:
    """Sign in on /login: the MFA page's location (ticket in the query)."""
    response = await post_form(
        client, "/login", "/login", email=user.email, password=user.password, next=next_path
    )
    assert response.status == 303
    location = response.headers["Location"]
    assert location.startswith("/login/mfa?ticket=")
    assert cookie(client, "auth_token") is None  # no session before the second factor
    assert cookie(client, "mfa_binding")
    return str(location)


async def test_password_then_totp_on_the_pages_lands_signed_in(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    location = await password_on_the_page(browser, user, next_path="/account")
    page = await (await browser.get(location)).text()
    assert "Code from your authenticator app" in page
    assert "Use a recovery code" in page
    ticket = parse_qs(urlsplit(location).query)["ticket"][0]

    # A wrong code: an error in words, still no session, and the ticket still works.
    wrong = str((int(enrolled.code()) + 1) % 1_000_000).zfill(6)
    response = await post_form(
        browser, location, "/login/mfa", ticket=ticket, next="/account", totp=wrong
    )
    assert response.status == 401
    assert alert(await response.text()) == "That code is not right. Check your app and try again."
    assert cookie(browser, "auth_token") is None

    response = await post_form(
        browser, location, "/login/mfa", ticket=ticket, next="/account", totp=enrolled.code(1)
    )
    assert response.status == 303
    assert response.headers["Location"] == "/account"
    assert claims(browser)["amr"] == ["pwd", "otp"]
    assert cookie(browser, "mfa_binding") in (None, "")
    account = await browser.get("/account", allow_redirects=False)
    assert account.status == 200
    assert user.email in await account.text()

    # The ticket was spent: the page says so in words.
    again = await (await browser.get(location)).text()
    assert "This sign-in took too long or was already used" in again


async def test_recovery_code_on_the_page_and_a_foreign_next_is_ignored(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    location = await password_on_the_page(browser, user)
    ticket = parse_qs(urlsplit(location).query)["ticket"][0]
    response = await post_form(
        browser,
        location,
        "/login/mfa",
        ticket=ticket,
        next="//evil.example/x",
        recoveryCode=enrolled.recovery_codes[0],
    )
    assert response.status == 303
    assert response.headers["Location"] == "/notifications"
    assert cookie(browser, "auth_token")


async def test_another_browser_cannot_use_the_ticket(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user, _ = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    location = await password_on_the_page(browser, user)
    thief = await make_client()
    page = await (await thief.get(location)).text()
    assert "This sign-in took too long or was already used" in page
    assert 'name="totp"' not in page
    assert cookie(thief, "auth_token") is None


async def test_totp_enrolment_and_removal_on_the_profile_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    page = await (await browser.get("/account")).text()
    assert "Two-factor authentication" in page
    assert 'data-testid="mfa-state">Off<' in page

    setup = await post_form(browser, "/account", "/account/mfa/totp/setup")
    assert setup.status == 200
    page = await setup.text()
    assert "<svg" in page  # the QR code, inline
    secret = re.search(r'data-testid="totp-secret">([A-Z2-7]+)<', page)
    assert secret
    totp = pyotp.TOTP(secret.group(1))

    # A wrong code first: in words, the confirm form stays.
    wrong = str((int(totp.now()) + 1) % 1_000_000).zfill(6)
    confirm_token = token_in(page, "/account/mfa/totp/confirm")
    response = await browser.post(
        "/account/mfa/totp/confirm", data={"csrf": confirm_token, "code": wrong}
    )
    assert response.status == 401
    page = await response.text()
    assert alert(page) == "That code is not right. Check your app and try again."
    assert 'action="/account/mfa/totp/confirm"' in page

    response = await browser.post(
        "/account/mfa/totp/confirm",
        data={"csrf": token_in(page, "/account/mfa/totp/confirm"), "code": totp.now()},
    )
    assert response.status == 200
    page = await response.text()
    codes = re.findall(r"<li><code>([a-z0-9-]+)</code></li>", page)
    assert len(codes) == 10  # shown once ...
    assert 'data-testid="mfa-state">On<' in page
    again = await (await browser.get("/account")).text()
    assert not re.findall(r"<li><code>", again)  # ... and never again
    assert "10 of 10 recovery codes left." in again

    # Removing it is a sensitive change: an old sign-in is asked to confirm it's them.
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    response = await post_form(stale, "/account", "/account/mfa/totp/disable")
    assert response.status == 403
    page = await response.text()
    assert 'data-testid="stepup"' in page
    assert "Confirm it&#39;s you" in page or "Confirm it's you" in page
    # A wrong password: in words, still asked.
    response = await stale.post(
        "/reauth",
        data={
            "csrf": token_in(page, "/reauth"),
            "back": "/account/mfa/totp/disable",
            "password": "not-the-password",
        },
        allow_redirects=False,
    )
    assert response.status == 401
    page = await response.text()
    assert 'data-testid="stepup"' in page
    response = await stale.post(
        "/reauth",
        data={
            "csrf": token_in(page, "/reauth"),
            "back": "/account/mfa/totp/disable",
            "totp": totp.at(time.time() + 30),
        },
        allow_redirects=False,
    )
    assert response.status == 303
    assert response.headers["Location"] == "/account?done=reauthed"
    assert claims(stale)["auth_time"] > time.time() - 60
    response = await post_form(stale, "/account", "/account/mfa/totp/disable")
    assert response.status == 303
    assert response.headers["Location"].startswith("/account?done=totp_off")
    page = await (await stale.get("/account")).text()
    assert 'data-testid="mfa-state">Off<' in page


async def test_step_up_goes_back_only_to_this_site(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    for back, expected in [
        ("//evil.example/x", "/account"),
        ("https://evil.example/", "/account"),
        ("/accounts/" + str(user.account_id) + "/transfer", f"/accounts/{user.account_id}/members"),
    ]:
        response = await post_form(
            stale,
            "/account",
            "/account/password",
            currentPassword=user.password,
            newPassword="another long password",
        )
        page = await response.text()
        assert 'data-testid="stepup"' in page, page[:2000]
        response = await stale.post(
            "/reauth",
            data={"csrf": token_in(page, "/reauth"), "back": back, "password": user.password},
            allow_redirects=False,
        )
        assert response.status == 303
        assert response.headers["Location"] == expected + "?done=reauthed"
        stale = await signed_in(make_client, db, settings, user, auth_age=3600)


async def test_email_change_from_the_profile_and_its_two_links(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    response = await post_form(browser, "/account", "/account/email", newEmail="Moved@Example.org")
    await mail_sent(browser)
    assert response.status == 303
    assert response.headers["Location"] == "/account?done=email_sent"
    [confirm] = mails_to(mail_dir, "moved@example.org")
    token = link_token(confirm, "/confirm-email")

    # A visitor who is not signed in is sent to sign in first, then back.
    visitor = await make_client()
    answer = await visitor.get(f"/confirm-email?token={token}", allow_redirects=False)
    assert answer.status == 303
    assert answer.headers["Location"].startswith("/login?next=%2Fconfirm-email")

    page_path = f"/confirm-email?token={token}"
    page = await (await browser.get(page_path)).text()
    assert "Your sign-in address becomes moved@example.org." in page
    assert await user_email(db, user) == user.email  # a GET changes nothing
    response = await post_form(browser, page_path, "/confirm-email", token=token)
    assert response.status == 303
    assert response.headers["Location"] == "/account?done=email_changed"
    assert await user_email(db, user) == "moved@example.org"
    # Used: the page says so in words.
    response = await post_form(browser, page_path, "/confirm-email", token=token)
    assert response.status == 422
    assert alert(await response.text()) == "This link is invalid, expired or already used."

    # "This wasn't me" from the old address: undone, every session ended.
    [notice] = [m for m in mails_to(mail_dir, user.email) if "cancel-email-change" in str(m)]
    cancel = link_token(notice, "/cancel-email-change")
    stranger = await make_client()
    cancel_path = f"/cancel-email-change?token={cancel}"
    page = await (await stranger.get(cancel_path)).text()
    assert "This wasn&#39;t me" in page or "This wasn't me" in page
    assert await user_email(db, user) == "moved@example.org"  # the GET changes nothing
    response = await post_form(stranger, cancel_path, "/cancel-email-change", token=cancel)
    assert response.status == 200
    assert "every session is signed out" in await response.text()
    assert await user_email(db, user) == user.email
    after = await browser.get("/account", allow_redirects=False)
    assert after.status == 303  # signed out
    # Used: the cancel link is refused in words too, and keeps its own page.
    response = await post_form(stranger, cancel_path, "/cancel-email-change", token=cancel)
    assert response.status == 422
    refused = await response.text()
    assert alert(refused) == "This link is invalid, expired or already used."
    assert 'action="/cancel-email-change"' in refused


async def test_owner_requires_mfa_on_the_members_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    # The owner has a factor: the policy is switched on from a session that used one.
    owner, enrolled = await user_with_totp(factory, make_client, db, settings)
    members = f"/accounts/{owner.account_id}/members"
    action = f"/accounts/{owner.account_id}/require-mfa"
    stale = await signed_in(make_client, db, settings, owner, auth_age=3600)
    page = await (await stale.get(members)).text()
    assert "Require two-factor authentication" in page
    response = await post_form(stale, members, action, requireMfa="true")
    assert response.status == 403
    page = await response.text()
    assert 'data-testid="stepup"' in page
    assert f'name="back" value="{action}"' in page
    response = await stale.post(
        "/reauth",
        data={"csrf": token_in(page, "/reauth"), "back": action, "totp": enrolled.code(+1)},
        allow_redirects=False,
    )
    assert response.headers["Location"] == members + "?done=reauthed"
    response = await post_form(stale, members, action, requireMfa="true")
    assert response.status == 303
    assert response.headers["Location"] == members + "?done=mfa_required"
    required = await db.fetch_val(
        "SELECT require_mfa FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
    )
    assert required is True
    page = await (await stale.get(members)).text()
    assert ">Turn off</button>" in page


async def test_passkeys_are_listed_renamed_and_removed_on_the_profile_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    async with db.transaction() as conn:
        row = await mfa_queries.insert_passkey(
            conn,
            user_id=user.id,
            credential_id=b"credential-1",
            public_key=b"key",
            sign_count=0,
            aaguid=None,
            transports=["internal"],
            name="Old laptop",
            backed_up=False,
        )
    browser = await signed_in(make_client, db, settings, user)
    page = await (await browser.get("/account")).text()
    assert "<strong>Old laptop</strong>" in page
    rename = f"/account/passkeys/{row['id']}/rename"
    response = await post_form(browser, "/account", rename, name="Work laptop")
    assert response.status == 303
    assert response.headers["Location"].startswith("/account?done=passkey_renamed")
    page = await (await browser.get("/account")).text()
    assert "<strong>Work laptop</strong>" in page
    assert "Passkey renamed." in await (await browser.get("/account?done=passkey_renamed")).text()

    # Another user's passkey id is not theirs to rename.
    other = await factory.user()
    stranger = await signed_in(make_client, db, settings, other)
    page = await (await stranger.get("/account")).text()
    response = await stranger.post(
        rename, data={"csrf": token_in(page, "/account/email"), "name": "Mine"}
    )
    assert response.status == 403  # the form token is for another form
    # A blank name: refused in words on the profile page, the passkey keeps its name.
    response = await post_form(browser, "/account", rename, name="  ")
    assert response.status == 422
    page = await response.text()
    assert alert(page) and 'data-testid="mfa-state"' in page
    assert "<strong>Work laptop</strong>" in page
    remove = f"/account/passkeys/{row['id']}/delete"
    response = await post_form(browser, "/account", remove)
    assert response.status == 303
    page = await (await browser.get("/account")).text()
    assert "Work laptop" not in page
    assert "No passkey yet." in page


async def test_a_deleted_account_is_restored_from_the_accounts_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    owner = await factory.user()
    browser = await signed_in(make_client, db, settings, owner)
    created = await post_form(browser, "/accounts", "/accounts", name="Side project")
    assert created.status == 303
    account_id = await db.fetch_val("SELECT id FROM accounts WHERE name = 'Side project'", {})
    members = f"/accounts/{account_id}/members"
    response = await post_form(browser, members, f"/accounts/{account_id}/delete")
    assert response.status == 303, await response.text()
    page = await (await browser.get("/accounts")).text()
    assert 'data-testid="deleted-accounts"' in page
    assert "Side project" in page
    # Someone else sees no such button and cannot restore it.
    other = await signed_in(make_client, db, settings, await factory.user())
    assert "Side project" not in await (await other.get("/accounts")).text()

    response = await post_form(browser, "/accounts", f"/accounts/{account_id}/restore")
    assert response.status == 303
    assert response.headers["Location"] == "/accounts?done=restored"
    deleted_at = await db.fetch_val(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": account_id}
    )
    assert deleted_at is None
    page = await (await browser.get("/accounts?done=restored")).text()
    assert "The account is restored." in page
    assert 'data-testid="deleted-accounts"' not in page


# -- issue 25: the hosted forms of sensitive actions keep the action's step-up -------------------


async def test_a_stale_session_cannot_change_the_email_on_the_page(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    response = await post_form(stale, "/account", "/account/email", newEmail="thief@example.org")
    assert response.status == 403
    page = await response.text()
    assert 'data-testid="stepup"' in page  # sent to confirm it is them
    assert await user_email(db, user) == user.email
    assert mails_to(mail_dir, "thief@example.org") == []
    pending = await db.fetch_val(
        "SELECT count(*) FROM email_changes WHERE user_id = %(u)s", {"u": user.id}
    )
    assert pending == 0


async def test_a_stale_session_cannot_restore_an_account_on_the_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    owner = await factory.user()
    browser = await signed_in(make_client, db, settings, owner)
    created = await post_form(browser, "/accounts", "/accounts", name="Old project")
    assert created.status == 303
    account_id = await db.fetch_val("SELECT id FROM accounts WHERE name = 'Old project'", {})
    members = f"/accounts/{account_id}/members"
    assert (await post_form(browser, members, f"/accounts/{account_id}/delete")).status == 303

    stale = await signed_in(make_client, db, settings, owner, auth_age=3600)
    response = await post_form(stale, "/accounts", f"/accounts/{account_id}/restore")
    assert response.status == 403
    page = await response.text()
    assert 'data-testid="stepup"' in page
    assert 'name="back" value="/accounts"' in page
    deleted_at = await db.fetch_val(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": account_id}
    )
    assert deleted_at is not None
