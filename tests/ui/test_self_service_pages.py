"""The profile and members pages gain what the API has (issue 28, part 5): edit my names,
download everything stored about me, delete my user (step-up; refused with a clear message
while I own an account with other members), rename an account (owner and admin only)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tenantd.ui import csrf
from tests.factories import Factory
from tests.mfa.helpers import signed_in
from tests.test_sensitive_routes import form_token
from tests.ui.test_mfa_pages import alert, post_form


async def test_names_are_edited_on_the_profile_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user(first_name="Ann", last_name="Old")
    browser = await signed_in(make_client, db, settings, user)
    page = await (await browser.get("/account")).text()
    assert 'data-testid="names"' in page and 'value="Old"' in page
    response = await post_form(
        browser, "/account", "/account/names", firstName="Ann", lastName="Lee"
    )
    assert response.status == 303
    assert response.headers["Location"] == "/account?done=names"
    page = await (await browser.get("/account?done=names")).text()
    assert "Name saved." in page and "Ann Lee" in page
    # The API's rule: a line separator is refused, in words, and nothing is stored.
    refused = await post_form(
        browser, "/account", "/account/names", firstName="Ann\u2028Evil", lastName="Lee"
    )
    assert refused.status == 422
    assert 'id="e-firstName"' in await refused.text()
    assert (
        await db.fetch_val("SELECT first_name FROM users WHERE id = %(u)s", {"u": user.id})
    ) == "Ann"
    # Without the form's token nothing happens.
    forged = await browser.post("/account/names", data={"firstName": "X"}, allow_redirects=False)
    assert forged.status == 403


async def test_my_data_downloads_as_a_file(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user(first_name="Dee")
    browser = await signed_in(make_client, db, settings, user)
    page = await (await browser.get("/account")).text()
    assert 'href="/account/export"' in page
    response = await browser.get("/account/export")
    assert response.status == 200
    assert response.headers["Content-Disposition"].startswith("attachment;")
    exported = json.loads(await response.read())
    assert exported["user"]["email"] == user.email
    assert exported["user"]["firstName"] == "Dee"
    # The same content as the API's export (apart from when it was made).
    api = (await (await browser.get("/api/v1/users/me/export")).json())["data"]
    assert {k: v for k, v in api.items() if k != "exportedAt"} == {
        k: v for k, v in exported.items() if k != "exportedAt"
    }
    anonymous = await make_client()
    response = await anonymous.get("/account/export", allow_redirects=False)
    assert response.status == 303 and response.headers["Location"].startswith("/login")


async def test_delete_my_user_from_the_page(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    response = await post_form(browser, "/account", "/account/delete")
    assert response.status == 303, await response.text()
    assert response.headers["Location"] == "/login?done=user_deleted"
    deleted = await db.fetch_val("SELECT deleted_at FROM users WHERE id = %(u)s", {"u": user.id})
    assert deleted is not None
    page = await (await browser.get("/login?done=user_deleted")).text()
    assert "Your user is deleted." in page
    # The session is gone: the profile asks to sign in.
    again = await browser.get("/account", allow_redirects=False)
    assert again.status == 303 and again.headers["Location"].startswith("/login")


async def test_delete_my_user_is_refused_while_i_own_a_shared_account(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    owner = await factory.user(plan="team")
    assert owner.account_id is not None
    await factory.member(owner.account_id, (await factory.user()).id, "member")
    name = await db.fetch_val("SELECT name FROM accounts WHERE id = %(a)s", {"a": owner.account_id})
    browser = await signed_in(make_client, db, settings, owner)
    response = await post_form(browser, "/account", "/account/delete")
    assert response.status == 409
    page = await response.text()
    assert alert(page).startswith("You own an account that has other members.")
    assert 'data-testid="delete-blocked"' in page
    assert f'href="/accounts/{owner.account_id}/members"' in page and name in page
    assert (
        await db.fetch_val("SELECT deleted_at FROM users WHERE id = %(u)s", {"u": owner.id})
    ) is None


async def test_a_stale_session_is_sent_to_confirm_it_is_them_before_deleting(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    response = await post_form(stale, "/account", "/account/delete")
    assert response.status == 403
    assert 'data-testid="stepup"' in await response.text()
    assert (
        await db.fetch_val("SELECT deleted_at FROM users WHERE id = %(u)s", {"u": user.id})
    ) is None


async def test_an_account_is_renamed_on_its_page_by_its_owner_or_admin_only(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    owner = await factory.user(plan="team")
    account = owner.account_id
    assert account is not None
    member = await factory.user(account=False)
    await factory.member(account, member.id, "member")
    browser = await signed_in(make_client, db, settings, owner)
    members = f"/accounts/{account}/members"
    response = await post_form(browser, members, f"/accounts/{account}/rename", name=" Acme ")
    assert response.status == 303
    assert (
        await db.fetch_val("SELECT name FROM accounts WHERE id = %(a)s", {"a": account})
    ) == "Acme"
    page = await (await browser.get(response.headers["Location"])).text()
    assert "Account renamed." in page and 'data-testid="rename"' in page
    audit = await db.fetch_val(
        "SELECT data FROM audit_log WHERE action = 'account.renamed' AND account_id = %(a)s",
        {"a": account},
    )
    assert audit["to"] == "Acme"
    # A plain member sees no form, and a post with a valid form token is refused all the same.
    other = await signed_in(make_client, db, settings, member, account_id=account)
    page = await (await other.get(members)).text()
    assert 'data-testid="rename"' not in page
    secret = "member-" + uuid.uuid4().hex
    other.session.cookie_jar.update_cookies(
        {csrf.CSRF_COOKIE: secret}, response_url=other.make_url("/")
    )
    rename = f"/accounts/{account}/rename"
    forged = {"csrf": form_token(settings, secret, rename), "name": "Mine now"}
    refused = await other.post(rename, data=forged, allow_redirects=False)
    assert refused.status == 403
    assert "You are not allowed to do this." in alert(await refused.text())
    empty = await post_form(browser, members, rename, name="")
    assert empty.status == 422
    stored = await db.fetch_val("SELECT name FROM accounts WHERE id = %(a)s", {"a": account})
    assert stored == "Acme"
