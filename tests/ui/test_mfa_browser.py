"""The main two-factor flow in Chromium: set up an authenticator app on /account (codes from
pyotp), save the recovery codes, sign out, sign in with the password, then the code on
/login/mfa (a wrong one first) lands signed in."""

from __future__ import annotations

import time

import pyotp
from playwright.sync_api import Page, expect

from tests.helpers import PASSWORD
from tests.ui.live import LiveServer, shoot, sign_up, unique_email


def test_enrol_totp_then_sign_in_with_a_code(page: Page, live: LiveServer) -> None:
    address = unique_email("totp")
    sign_up(page, live, address)

    page.goto(live.url("/account"))
    block = page.get_by_test_id("mfa")
    expect(block.get_by_role("heading", name="Two-factor authentication")).to_be_visible()
    expect(page.get_by_test_id("mfa-state")).to_have_text("Off")
    page.get_by_role("button", name="Set up an authenticator app").click()
    expect(page.get_by_test_id("qr").locator("svg")).to_be_visible()
    totp = pyotp.TOTP(page.get_by_test_id("totp-secret").inner_text().strip())
    page.locator("#mfa").scroll_into_view_if_needed()
    shoot(page, "account-mfa-setup")
    page.get_by_label("Code from your authenticator app").fill(totp.now())
    page.get_by_role("button", name="Turn on").click()
    expect(page.get_by_test_id("recovery-codes").locator("li")).to_have_count(10)
    expect(page.get_by_test_id("mfa-state")).to_have_text("On")
    shoot(page, "account-mfa-codes")

    page.get_by_role("button", name="Sign out").first.click()
    page.wait_for_url("**/login**")
    page.get_by_label("Email").fill(address)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url("**/login/mfa?ticket=**")
    expect(page.get_by_role("heading", name="Two-step verification")).to_be_visible()
    shoot(page, "login-mfa")

    code = page.get_by_label("Code from your authenticator app")
    expect(code).to_be_focused()
    wrong = str((int(totp.now()) + 1) % 1_000_000).zfill(6)
    code.fill(wrong)
    page.get_by_role("button", name="Verify").click()
    expect(page.get_by_test_id("error")).to_have_text(
        "That code is not right. Check your app and try again."
    )
    shoot(page, "login-mfa-error")
    # The enrolment's code was spent (replay refused): the next step's code is accepted.
    page.get_by_label("Code from your authenticator app").fill(totp.at(time.time() + 30))
    page.get_by_role("button", name="Verify").click()
    page.wait_for_url("**/notifications**")
    expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)
