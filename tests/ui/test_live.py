"""Live behaviour in Chromium: an SSE item appears without reload, a server-side logout-all
shows signed-out, and two tabs racing to refresh one expired session both stay signed in."""

from __future__ import annotations

import json
import uuid
from typing import Any

from playwright.sync_api import BrowserContext, Page, expect

from tenantd.notifications.unsubscribe import make_token
from tests.helpers import SECRET
from tests.ui.live import LiveServer, cookies_of, shoot, sign_up, unique_email


def _user_id(page: Page) -> str:
    me: dict[str, Any] = page.request.get("/api/v1/users/me").json()
    return str(me["user"]["id"])


def _send(live: LiveServer, user_id: str, text: str, n: int = 1) -> None:
    payload = {"actorId": "someone-else", "commentId": f"c-{text}-{n}", "text": text}
    live.cli(
        "notify", "send", "comment.created", "--user", user_id, "--payload", json.dumps(payload)
    )


def test_a_new_notification_appears_live_then_logout_all_shows_signed_out(
    page: Page, context: BrowserContext, live: LiveServer
) -> None:
    address = unique_email("live")
    sign_up(page, live, address)
    user_id = _user_id(page)
    _send(live, user_id, "An earlier comment", 0)
    page.goto("/notifications")
    expect(page.locator("[data-live]")).to_have_attribute("data-state", "open")
    expect(page.get_by_test_id("unread")).to_contain_text("1 unread")

    _send(live, user_id, "Hello from the server")
    inbox = page.get_by_test_id("inbox")
    expect(inbox).to_contain_text("Hello from the server")  # no reload
    expect(page.get_by_test_id("unread")).to_contain_text("2 unread")
    expect(page.locator("[data-unread-count]")).to_have_text("2")
    shoot(page, "notifications")

    # Mark read in place (the module), then everything (a plain form post).
    page.locator(".note.unread").first.get_by_role("button", name="Mark read").click()
    expect(page.get_by_test_id("unread")).to_contain_text("1 unread")
    page.get_by_role("button", name="Mark all read").click()
    expect(page.get_by_test_id("unread")).to_contain_text("0 unread")

    # The same user signs out everywhere from another device: this page notices.
    expect(page.locator("[data-live]")).to_have_attribute("data-state", "open")
    status, _ = live.api("POST", "/api/v1/auth/logout-all", cookies=cookies_of(context))
    assert status == 200
    expect(page.get_by_test_id("signed-out")).to_be_visible(timeout=30_000)
    page.reload()
    page.wait_for_url("**/login**")


def test_two_tabs_racing_a_refresh_stay_signed_in(
    context: BrowserContext, page: Page, live: LiveServer
) -> None:
    sign_up(page, live, unique_email("tabs"))
    other = context.new_page()
    other.goto("/account")
    page.goto("/account")
    refreshes: list[str] = []
    context.on(
        "request",
        lambda r: refreshes.append(r.url) if r.url.endswith("/api/v1/auth/refresh") else None,
    )
    # The access token expired: the browser stops sending it (Max-Age); the refresh cookie
    # still holds, so the API answers 401 missing_session and both tabs want a refresh.
    context.clear_cookies(name="auth_token")
    start = "window.__race = import('/static/tenantd.js').then(m => m.notifications.unreadCount())"
    page.evaluate(start)
    other.evaluate(start)
    assert page.evaluate("window.__race") == 0
    assert other.evaluate("window.__race") == 0
    assert len(refreshes) == 1, refreshes  # single-flight across the tabs
    for tab in (page, other):
        expect(tab.get_by_test_id("signed-out")).to_be_hidden()
        assert tab.evaluate("import('/static/tenantd.js').then(m => m.me()).then(d => !!d.user)")
    shoot(page, "account")


def test_a_failed_refresh_reports_signed_out(
    context: BrowserContext, page: Page, live: LiveServer
) -> None:
    sign_up(page, live, unique_email("gone"))
    page.goto("/account")
    context.add_cookies(
        [
            {"name": "auth_token", "value": "expired.token.value", "url": live.base},
            {"name": "refresh_token", "value": "revoked", "url": live.base},
        ]
    )
    result = page.evaluate(
        """import('/static/tenantd.js').then(async (m) => {
             let reason = null;
             m.onSignedOut((r) => { reason = r; });
             try { await m.notifications.unreadCount(); return 'answered'; }
             catch (e) { return e.status + ':' + reason; }
           })"""
    )
    assert result == "401:refresh_failed"
    expect(page.get_by_test_id("signed-out")).to_be_visible()


def test_preferences_and_the_unsubscribe_page(page: Page, live: LiveServer) -> None:
    sign_up(page, live, unique_email("prefs"))
    user_id = _user_id(page)
    page.goto("/notifications")
    page.get_by_role("link", name="Preferences").click()
    live_box = page.get_by_label("ping.simple: Live")
    expect(live_box).to_be_checked()
    live_box.uncheck()
    shoot(page, "preferences")
    page.get_by_role("button", name="Save preferences").click()
    expect(page.get_by_test_id("notice")).to_contain_text("Preferences saved")
    expect(page.get_by_label("ping.simple: Live")).not_to_be_checked()
    expect(page.get_by_label("comment.created: Email")).to_be_checked()

    # The email's unsubscribe link: a confirmation page, one button, then done.
    token = make_token(SECRET, user_id=uuid.UUID(user_id), event_type="comment.created")
    page.goto("/unsubscribe?token=" + token)
    expect(page.get_by_text("Stop emails about comment.created?")).to_be_visible()
    shoot(page, "unsubscribe")
    page.get_by_role("button", name="Unsubscribe").click()
    expect(page.get_by_test_id("notice")).to_contain_text("no more emails about comment.created")
    page.goto("/notifications/preferences")
    expect(page.get_by_label("comment.created: Email")).not_to_be_checked()
    page.goto("/unsubscribe?token=forged")
    expect(page.get_by_test_id("error")).to_be_visible()
