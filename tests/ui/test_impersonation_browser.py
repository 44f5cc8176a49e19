"""An operator's impersonation link in Chromium (issue 28 part 4): `tenantd users impersonate`
prints the link, the browser lands signed in as the user with the banner on every page, a
sensitive form is refused in words, and the link does not work twice."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.ui.live import DESKTOP, LiveServer, shoot, sign_up, unique_email


def test_impersonation_shows_the_banner_and_refuses_sensitive_forms(
    page: Page, browser: Browser, live: LiveServer
) -> None:
    address = unique_email("ada")
    sign_up(page, live, address)
    expect(page.get_by_test_id("impersonation")).to_have_count(0)  # the user's own session

    link = live.cli("users", "impersonate", address, "--reason", "ticket 4711").strip()
    assert link.startswith(live.base + "/impersonate?token=")
    operator = browser.new_context(base_url=live.base, viewport=DESKTOP)
    operator.set_default_timeout(30_000)
    try:
        tab = operator.new_page()
        tab.goto(link)
        tab.wait_for_url("**/notifications**")  # `/`, which sends a signed-in user onwards
        banner = tab.get_by_test_id("impersonation")
        expect(banner).to_have_text(f"You are signed in as {address} by an operator")
        for path in ("/account", "/accounts", "/notifications/preferences"):
            tab.goto(path)
            expect(tab.get_by_test_id("impersonation")).to_be_visible()
        tab.goto("/account")
        shoot(tab, "impersonation-banner")
        tab.locator("form[action='/account/mfa/totp/setup'] button").first.click()
        expect(tab.locator("body")).to_contain_text(
            "Not allowed while an operator is signed in as this user."
        )
        assert operator.cookies() and not any(
            c["name"] == "refresh_token" and c["value"] for c in operator.cookies()
        )
        # Used once: the link again signs in nobody.
        again = browser.new_context(base_url=live.base, viewport=DESKTOP)
        try:
            other = again.new_page()
            response = other.goto(link)
            assert response is not None and response.status == 422
            assert not any(c["name"] == "auth_token" for c in again.cookies())
        finally:
            again.close()
    finally:
        operator.close()
