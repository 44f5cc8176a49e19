"""End to end in Chromium: sign up from the emailed link, no-JavaScript sign-up and sign-in,
password reset, invitations across two browsers, switching accounts."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, Page, expect

from tests.helpers import PASSWORD
from tests.ui.live import DESKTOP, LiveServer, shoot, sign_up, unique_email


def test_sign_up_then_the_emailed_link_lands_signed_in(page: Page, live: LiveServer) -> None:
    address = unique_email("ada")
    page.goto(live.url("/signup"))
    expect(page.get_by_role("heading", name="Create your account")).to_be_visible()
    shoot(page, "signup")
    page.get_by_label("Email").fill(address)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    page.wait_for_url("**/check-inbox**")
    expect(page.get_by_role("heading", name="Check your inbox")).to_be_visible()
    shoot(page, "check-inbox")

    link = live.mail_to(address, "/verify-email?token=")
    page.goto(link)
    page.wait_for_url("**/notifications**")
    expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)
    expect(page.get_by_test_id("notice")).to_contain_text("Welcome")
    shoot(page, "notifications-empty")


def test_sign_up_and_sign_in_work_without_javascript(browser: Browser, live: LiveServer) -> None:
    context = browser.new_context(base_url=live.base, java_script_enabled=False, viewport=DESKTOP)
    try:
        page = context.new_page()
        address = unique_email("nojs")
        page.goto("/signup")
        page.get_by_label("Email").fill(address)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign up").click()
        page.wait_for_url("**/check-inbox**")

        page.goto(live.mail_to(address, "/verify-email?token="))
        # Without JavaScript the link shows one button (a mail scanner's GET changes nothing).
        expect(page.get_by_role("heading", name="Confirm your email address")).to_be_visible()
        shoot(page, "verify-email")
        page.get_by_role("button", name="Confirm email address").click()
        page.wait_for_url("**/notifications**")
        expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)

        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/login**")
        expect(page.get_by_test_id("notice")).to_contain_text("signed out")

        page.get_by_label("Email").fill(address)
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Sign in", exact=True).click()
        expect(page.get_by_test_id("error")).to_contain_text("do not match")

        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in", exact=True).click()
        page.wait_for_url("**/notifications**")
        expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)
    finally:
        context.close()


def test_a_form_posted_from_another_site_is_refused(page: Page, live: LiveServer) -> None:
    address = unique_email("csrf")
    sign_up(page, live, address)
    status, _ = live.api("POST", "/api/v1/auth/login", {"email": address, "password": PASSWORD})
    assert status == 200
    # A post without the form token (as another site would send it) changes nothing.
    response = page.request.post(
        live.url("/accounts"), form={"name": "Evil"}, headers={"Origin": "https://evil.example"}
    )
    assert response.status == 403
    response = page.request.post(
        live.url("/accounts"), form={"name": "Evil", "csrf": "x"}, headers={"Origin": live.base}
    )
    assert response.status == 403
    page.goto("/accounts")
    expect(page.get_by_text("Evil")).to_have_count(0)


def test_login_page_shows_provider_refusals_in_words(page: Page, live: LiveServer) -> None:
    page.goto("/login?error=oauth_denied")
    expect(page.get_by_test_id("error")).to_contain_text("did not let you in")
    page.goto("/login?error=<script>")
    expect(page.get_by_test_id("error")).to_contain_text("Sign-in did not complete")
    shoot(page, "login")


def test_reset_password(page: Page, live: LiveServer) -> None:
    address = unique_email("reset")
    sign_up(page, live, address)
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login**")
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Email").fill(address)
    shoot(page, "reset-request")
    page.get_by_role("button", name="Send reset link").click()
    expect(page.get_by_test_id("notice")).to_contain_text("reset link")

    page.goto(live.mail_to(address, "/reset-password?token="))
    page.get_by_label("New password").fill("an entirely new passphrase")
    shoot(page, "reset-confirm")
    page.get_by_role("button", name="Set new password").click()
    page.wait_for_url("**/login**")
    expect(page.get_by_test_id("notice")).to_contain_text("password is changed")

    page.get_by_label("Email").fill(address)
    page.get_by_label("Password").fill("an entirely new passphrase")
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url("**/notifications**")
    expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)


def _account_id(page: Page) -> str:
    me: dict[str, Any] = page.request.get("/api/v1/users/me").json()
    return str(me["account"]["id"])


def test_invite_then_accept_in_a_second_browser(
    page: Page, browser: Browser, live: LiveServer
) -> None:
    owner = unique_email("owner")
    sign_up(page, live, owner)
    account_id = _account_id(page)
    live.cli("accounts", "set-plan", account_id, "team")

    page.get_by_role("link", name="Members").click()
    invitee = unique_email("grace")
    page.get_by_label("Email").fill(invitee)
    page.get_by_role("button", name="Send invitation").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Invitation sent")
    expect(page.get_by_test_id("invitations")).to_contain_text(invitee)
    shoot(page, "members")

    link = live.mail_to(invitee, "/invitations/accept?token=")
    second = browser.new_context(base_url=live.base, viewport=DESKTOP)
    try:
        guest = second.new_page()
        guest.goto(link)
        expect(guest.get_by_role("heading", name="You are invited")).to_be_visible()
        shoot(guest, "invitation")
        guest.get_by_role("link", name="Sign up").click()
        guest.get_by_label("Email").fill(invitee)
        guest.get_by_label("Password").fill(PASSWORD)
        guest.get_by_role("button", name="Sign up").click()
        guest.wait_for_url("**/check-inbox**")
        guest.goto(live.mail_to(invitee, "/verify-email?token="))
        # Signed up from the invitation: the verified browser comes back to it.
        guest.wait_for_url("**/invitations/accept**")
        guest.get_by_role("button", name="Accept invitation").click()
        guest.wait_for_url(f"**/accounts/{account_id}/members**")
        expect(guest.get_by_test_id("notice")).to_contain_text("Invitation accepted")
        expect(guest.get_by_test_id("members")).to_contain_text(owner)
        expect(guest.get_by_test_id("members")).to_contain_text(invitee)
    finally:
        second.close()

    page.reload()
    expect(page.get_by_test_id("members")).to_contain_text(invitee)
    shoot(page, "members-team")
    page.get_by_role("link", name="Join requests").click()
    expect(page.get_by_role("heading", name="Join requests")).to_be_visible()
    shoot(page, "join-requests")


def test_a_wrong_address_invitation_explains_itself(
    page: Page, browser: Browser, live: LiveServer
) -> None:
    owner = unique_email("owner")
    sign_up(page, live, owner)
    live.cli("accounts", "set-plan", _account_id(page), "team")
    page.goto(page.url.split("/notifications")[0] + "/accounts")
    page.get_by_role("link", name="Members").first.click()
    invited = unique_email("invited")
    page.get_by_label("Email").fill(invited)
    page.get_by_role("button", name="Send invitation").click()
    link = live.mail_to(invited, "/invitations/accept?token=")
    second = browser.new_context(base_url=live.base, viewport=DESKTOP)
    try:
        other = second.new_page()
        sign_up(other, live, unique_email("other"))
        other.goto(link)
        other.get_by_role("button", name="Accept invitation").click()
        expect(other.get_by_test_id("error")).to_contain_text("another email address")
    finally:
        second.close()


def test_create_and_switch_accounts(page: Page, live: LiveServer) -> None:
    address = unique_email("switch")
    sign_up(page, live, address)
    first = page.get_by_test_id("active-account").inner_text()
    page.get_by_role("link", name="Accounts").click()
    page.get_by_label("Account name").fill("Acme Two")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Account created")
    expect(page.get_by_test_id("active-account")).to_have_text("Acme Two")
    shoot(page, "accounts")

    # The header's switcher: choosing is switching (JavaScript on).
    page.get_by_label("Switch account").select_option(label=first)
    expect(page.get_by_test_id("active-account")).to_have_text(first)
    # And the list's button (works without JavaScript too).
    page.goto("/accounts")
    page.get_by_role("button", name="Switch to this account: Acme Two").click()
    expect(page.get_by_test_id("active-account")).to_have_text("Acme Two")
