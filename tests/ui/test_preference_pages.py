"""Notification settings in the hosted pages, without JavaScript: a frequency per event type x
channel, the account's defaults set by its owner and shown as "Account default" against the
user's own "Your choice", quiet hours with a time zone, and the language."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.helpers import PASSWORD
from tests.notifications.support import EVENT_MODULE
from tests.ui.live import DESKTOP, LiveServer, shoot, unique_email


@pytest.fixture(scope="module")
def live_env() -> dict[str, str]:
    # The issue-18 events: alert.digest and alert.mailed_digest declare digests.
    return {"TENANTD_EVENT_MODULES": f"{EVENT_MODULE},tests.notifications.beyond_events_fixture"}


@pytest.fixture
def no_js(browser: Browser, live: LiveServer) -> Iterator[BrowserContext]:
    context = browser.new_context(base_url=live.base, java_script_enabled=False, viewport=DESKTOP)
    context.set_default_timeout(30_000)
    try:
        yield context
    finally:
        context.close()


def sign_up_without_javascript(page: Page, live: LiveServer, address: str) -> None:
    page.goto("/signup")
    page.get_by_label("Email").fill(address)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    page.wait_for_url("**/check-inbox**")
    page.goto(live.mail_to(address, "/verify-email?token="))
    page.get_by_role("button", name="Confirm email address").click()
    page.wait_for_url("**/notifications**")


def test_frequency_account_defaults_and_quiet_hours(
    no_js: BrowserContext, live: LiveServer
) -> None:
    page = no_js.new_page()
    sign_up_without_javascript(page, live, unique_email("prefs18"))
    page.goto("/notifications")
    page.get_by_role("link", name="Preferences").click()
    page.wait_for_url("**/notifications/preferences")

    # A digest event offers how often, per channel; nothing is marked before any choice.
    frequency = page.get_by_label("alert.digest: In app, how often")
    expect(frequency).to_have_value("")
    expect(frequency.locator("option:checked")).to_have_text("Digest every hour")
    expect(page.get_by_label("ping.simple: In app, how often")).to_have_count(0)
    expect(page.get_by_text("Your choice", exact=True)).to_have_count(0)
    frequency.select_option("daily")
    page.get_by_label("ping.simple: Live").uncheck()
    page.get_by_role("button", name="Save preferences").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Preferences saved")
    expect(page.get_by_label("alert.digest: In app, how often")).to_have_value("daily")
    expect(page.get_by_label("ping.simple: Live")).not_to_be_checked()
    expect(page.get_by_test_id("source-ping.simple-sse")).to_have_text("Your choice")

    # The owner sets an account default: off for comment.created by email.
    page.get_by_role("link", name="Account defaults").click()
    page.wait_for_url("**/notification-defaults")
    expect(page.get_by_role("heading", name="Account notification defaults")).to_be_visible()
    page.get_by_label("comment.created: Email, default for everyone").select_option("off")
    page.get_by_label("ping.simple: Live, default for everyone").select_option("on")
    shoot(page, "notification-defaults")
    page.get_by_role("button", name="Save defaults").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Account defaults saved")
    expect(page.get_by_label("comment.created: Email, default for everyone")).to_have_value("off")

    # The inbox says the account's defaults apply; the preferences show which.
    page.goto("/notifications")
    expect(page.get_by_test_id("inbox-defaults-note")).to_be_visible()
    page.get_by_role("link", name="See which in your preferences").click()
    page.wait_for_url("**/notifications/preferences")
    email = page.get_by_label("comment.created: Email")
    expect(email).not_to_be_checked()
    expect(page.get_by_test_id("source-comment.created-email")).to_have_text("Account default")
    expect(page.get_by_test_id("account-defaults-note")).to_be_visible()
    shoot(page, "preferences-account-default")
    # ping.simple Live: the user's "off" wins over the account's "on".
    expect(page.get_by_label("ping.simple: Live")).not_to_be_checked()
    expect(page.get_by_test_id("source-ping.simple-sse")).to_have_text("Your choice")
    expect(page.get_by_test_id("source-comment.created-in_app")).to_have_count(0)
    email.check()
    page.get_by_role("button", name="Save preferences").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Preferences saved")
    expect(page.get_by_label("comment.created: Email")).to_be_checked()
    expect(page.get_by_test_id("source-comment.created-email")).to_have_text("Your choice")
    # The user chose for every channel with a default now: the inbox note is gone.
    page.goto("/notifications")
    expect(page.get_by_test_id("inbox-defaults-note")).to_have_count(0)
    page.goto("/notifications/preferences")

    # Quiet hours need both ends: the refusal names the field, nothing is saved.
    page.get_by_label("Time zone").select_option("Europe/Paris")
    page.get_by_label("Quiet from").fill("22:00")
    page.get_by_role("button", name="Save quiet hours and language").click()
    expect(page.get_by_test_id("error")).to_be_visible()
    expect(page.locator("#e-quietHoursEnd")).to_be_visible()
    expect(page.get_by_label("Time zone")).to_have_value("Europe/Paris")

    page.get_by_label("Quiet from").fill("22:00")
    page.get_by_label("Quiet until").fill("07:30")
    page.get_by_label("Language", exact=True).select_option("fr")
    page.get_by_role("button", name="Save quiet hours and language").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Quiet hours and language saved")
    expect(page.get_by_test_id("quiet-summary")).to_have_text(
        "Quiet every day from 22:00 to 07:30 (Europe/Paris)."
    )
    expect(page.get_by_label("Language", exact=True)).to_have_value("fr")
    shoot(page, "preferences-settings")

    saved = page.request.get("/api/v1/notifications/settings").json()["data"]
    assert saved == {
        "locale": "fr",
        "timeZone": "Europe/Paris",
        "quietHoursStart": "22:00",
        "quietHoursEnd": "07:30",
    }
    chosen = page.request.get("/api/v1/notifications/preferences").json()["data"]
    digest = next(e for e in chosen if e["eventType"] == "alert.digest")
    assert digest["channels"][0]["frequency"] == "daily"
