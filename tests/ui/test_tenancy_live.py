"""tenantd's own notifications in the browser (TENANTD_BUILTIN_NOTIFICATIONS, as `scripts/run`
sets it): an invitation shows up live in the invitee's open inbox, the inviter sees "X joined"
live when it is accepted, and the email's unsubscribe link opens the confirmation page."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.ui.live import DESKTOP, LiveServer, shoot, sign_up, unique_email


@pytest.fixture(scope="module")
def live_env() -> dict[str, str]:
    return {"TENANTD_BUILTIN_NOTIFICATIONS": "true", "DEFAULT_PLAN": "team"}


def _account(page: Page) -> dict[str, Any]:
    me: dict[str, Any] = page.request.get("/api/v1/users/me").json()
    return me


def test_invited_and_joined_appear_live_without_reload(
    page: Page, browser: Browser, live: LiveServer
) -> None:
    owner = unique_email("ada")
    sign_up(page, live, owner)
    account_name = _account(page)["account"]["name"]

    second = browser.new_context(base_url=live.base, viewport=DESKTOP)
    second.set_default_timeout(30_000)
    try:
        guest = second.new_page()
        invitee = unique_email("grace")
        sign_up(guest, live, invitee)  # lands on /notifications, the stream open
        expect(guest.locator("[data-live]")).to_have_attribute("data-state", "open")

        page.goto("/notifications")
        expect(page.locator("[data-live]")).to_have_attribute("data-state", "open")
        # The owner invites from the members page (a plain form post)...
        page.get_by_role("link", name="Members").click()
        page.get_by_label("Email").fill(invitee)
        page.get_by_role("button", name="Send invitation").click()
        expect(page.get_by_test_id("notice")).to_contain_text("Invitation sent")

        # ...and the invitee's open inbox shows it without a reload.
        inbox = guest.get_by_test_id("inbox")
        expect(inbox).to_contain_text(f"invited you to {account_name}")
        expect(guest.locator("[data-unread-count]")).to_have_text("1")
        shoot(guest, "notification-invited")

        page.goto("/notifications")
        expect(page.locator("[data-live]")).to_have_attribute("data-state", "open")
        guest.goto(live.mail_to(invitee, "/invitations/accept?token="))
        guest.get_by_role("button", name="Accept invitation").click()
        guest.wait_for_url("**/members**")

        # The owner sees "Grace joined" arrive live, with a link to the members.
        owner_inbox = page.get_by_test_id("inbox")
        expect(owner_inbox).to_contain_text(f"{invitee} joined {account_name}")
        expect(page.get_by_test_id("unread")).to_contain_text("1 unread")
        expect(owner_inbox.get_by_role("link", name="See members")).to_be_visible()
        shoot(page, "notification-joined")
    finally:
        second.close()

    # The "joined" email: its unsubscribe link opens the page, which asks before it acts.
    link = live.mail_to(owner, "/unsubscribe?token=")
    assert "/api/" not in link
    page.goto(link)
    expect(page.get_by_text("Stop emails about New members of your accounts?")).to_be_visible()
    shoot(page, "unsubscribe-builtin")
    page.get_by_role("button", name="Unsubscribe").click()
    expect(page.get_by_test_id("notice")).to_contain_text("New members of your accounts")
    settings = page.request.get("/api/v1/notifications/preferences").json()["data"]
    joined = next(e for e in settings if e["eventType"] == "tenantd.member.joined")
    email = next(c for c in joined["channels"] if c["channel"] == "email")
    assert email["enabled"] is False
    page.goto("/notifications/preferences")
    shoot(page, "preferences-builtin")
