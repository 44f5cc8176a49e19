"""tenantd's Web Components (/static/components.js) in Chromium, embedded in a page of another
origin (the app on `app.example.test`, tenantd on `auth.example.test`, as in
tests/ui/test_cross_origin.py): the inbox's count, list, mark read and mark all read (the
server's state changes), a notification sent meanwhile arriving over SSE; the account switcher
switching the active account; the user button signing out; the keyboard (Tab to the bell,
Enter opens, Escape closes and gives the focus back); the roles and labels a screen reader
reads; the theme's custom properties. Each component is photographed open (a PNG checked in
every run): into the test's tmp_path, or into docs/screenshots/ for docs/components.md when
TENANTD_WRITE_SCREENSHOTS=1."""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.docs.snippets import snippet
from tests.helpers import PASSWORD
from tests.ui.live import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MISSING_CHROMIUM,
    REPO_ROOT,
    SIBLING_DOMAIN,
    WAIT,
    LiveServer,
    sibling_server,
    start_server,
    unique_email,
)
from tests.ui.test_cross_origin import call, verification_token

DOMAIN = SIBLING_DOMAIN
DOCS_SHOTS = REPO_ROOT / "docs" / "screenshots"  # with TENANTD_WRITE_SCREENSHOTS=1 only
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ACCENT = "rgb(15, 118, 110)"  # --tenantd-accent on the app's page: #0f766e

PLACEHOLDER = "https://auth.example.com"
LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Acme</title>
<style>
  body { margin: 0; font-family: system-ui, sans-serif; background: #f6f7f9; }
  header { display: flex; align-items: center; gap: 12px; padding: 12px 20px;
    background: #fff; border-bottom: 1px solid #e5e7eb; }
  header strong { margin-right: auto; }
  main { height: 520px; }
</style></head>
<body>SNIPPET<main></main></body></html>"""


def app_page(base: str) -> str:
    """docs/components.md's snippet (`components-page`), as written, in a page of the app."""
    code = snippet("components-page").code
    assert PLACEHOLDER in code
    return LAYOUT.replace("SNIPPET", code.replace(PLACEHOLDER, base))


APP_PAGE: dict[str, bytes] = {}  # what the app's server answers on every path


def set_page(html: str) -> None:
    APP_PAGE["page"] = html.encode()


@pytest.fixture(scope="module")
def app_port() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = APP_PAGE.get("page", b"")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def live(
    migrated: str, tmp_path_factory: pytest.TempPathFactory, app_port: int
) -> Iterator[LiveServer]:
    with sibling_server(migrated, tmp_path_factory.mktemp("components"), app_port) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP *.{DOMAIN} 127.0.0.1"],
            headless=True,
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 900, "height": 640})
    context.set_default_timeout(WAIT * 1000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the pictures go: docs/screenshots/ when TENANTD_WRITE_SCREENSHOTS=1 (to refresh
    docs/components.md's), else this test's tmp_path, so a run leaves the checkout as it was."""
    if os.environ.get("TENANTD_WRITE_SCREENSHOTS") == "1":
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SHOTS
    return tmp_path


def shoot(page: Page, host: str, name: str, folder: Path) -> None:
    """A picture of the component `host` with its open popover, for docs/components.md: a
    PNG of at least the component's size, in `folder`."""
    box = page.evaluate(
        """(host) => {
            const el = document.querySelector(host);
            const panel = el.shadowRoot.querySelector(".panel:not([hidden])");
            const rects = [el.getBoundingClientRect()];
            if (panel) rects.push(panel.getBoundingClientRect());
            const left = Math.min(...rects.map((r) => r.left)) - 16;
            const top = Math.min(...rects.map((r) => r.top)) - 12;
            const right = Math.max(...rects.map((r) => r.right)) + 16;
            const bottom = Math.max(...rects.map((r) => r.bottom)) + 16;
            return { x: Math.max(0, left), y: Math.max(0, top), width: right - Math.max(0, left),
                     height: bottom - Math.max(0, top) };
        }""",
        host,
    )
    page.mouse.move(0, 0)  # no hover in the picture
    path = folder / f"components-{name}.png"
    page.screenshot(path=str(path), clip=box)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 32 and height >= 32, (path, width, height)


def signed_up(page: Page, live: LiveServer, app: str, address: str) -> dict[str, Any]:
    """Sign up and verify from the app's page; the user's `/me`."""
    page.goto(app + "/")
    body = {"email": address, "password": PASSWORD, "firstName": "Ada", "lastName": "Lovelace"}
    registered = call(page, live.url("/auth/register"), "POST", body)
    assert registered.get("status") in (200, 201, 202), registered
    token = verification_token(live, address)
    assert call(page, live.url("/auth/verify-email"), "POST", {"token": token})["status"] == 200
    me = call(page, live.url("/api/v1/users/me"))["body"]
    assert isinstance(me, dict) and me["user"]["email"] == address, me
    return me


def api(page: Page, live: LiveServer, path: str, method: str = "GET", body: object = None) -> Any:
    answer = call(page, live.url(path), method, body)
    assert "blocked" not in answer and int(answer["status"]) < 300, answer  # type: ignore[call-overload]
    data = answer["body"]
    return data["data"] if isinstance(data, dict) and "data" in data else data


def send(live: LiveServer, user_id: str, n: int) -> None:
    live.cli("notify", "send", "ping.simple", "--user", user_id, "--payload", json.dumps({"n": n}))


def shadow(page: Page, host: str, script: str) -> Any:
    """Evaluate `script` (a function of the host's shadow root) in the page."""
    return page.evaluate(f"() => ({script})(document.querySelector({host!r}).shadowRoot)")


def test_the_components_work_from_another_origin(
    page: Page, live: LiveServer, app_port: int, shots: Path
) -> None:
    app = f"http://app.{DOMAIN}:{app_port}"
    set_page(app_page(live.base))
    me = signed_up(page, live, app, unique_email("components"))
    user_id = me["user"]["id"]
    first = api(page, live, f"/api/v1/accounts/{me['account']['id']}", "PATCH", {"name": "Acme"})
    second = api(page, live, "/api/v1/accounts", "POST", {"name": "Globex Research"})
    second_id = second["id"] if "id" in second else second["account"]["id"]
    send(live, user_id, 1)
    send(live, user_id, 2)

    page.goto(app + "/")
    inbox = page.locator("tenantd-inbox")
    expect(inbox).to_have_attribute("data-state", "ready")
    expect(inbox).to_have_attribute("data-stream", "open")

    # The bell: its count (badge and label), a screen reader's live region.
    bell = page.get_by_role("button", name="Notifications, 2 unread")
    expect(bell).to_have_attribute("aria-expanded", "false")
    expect(inbox.locator(".badge")).to_have_text("2")
    expect(page.get_by_role("status")).to_have_text("2 unread notifications")

    # The keyboard: Tab reaches the switcher, then the bell; Enter opens; Escape closes.
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("Tab")
    assert (
        shadow(
            page, "tenantd-account-switcher", "r => r.activeElement?.getAttribute('aria-haspopup')"
        )
        == "listbox"
    )
    page.keyboard.press("Tab")
    assert shadow(page, "tenantd-inbox", "r => r.activeElement?.getAttribute('part')") == "bell"
    page.keyboard.press("Enter")
    expect(bell).to_have_attribute("aria-expanded", "true")
    dialog = page.get_by_role("dialog", name="Notifications")
    expect(dialog).to_be_visible()
    items = dialog.get_by_role("listitem")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("Ping 2")  # newest first
    expect(items.nth(1)).to_contain_text("Ping 1")
    assert dialog.locator("time").first.get_attribute("datetime")
    prefs = dialog.get_by_role("link", name="Notification preferences")
    expect(prefs).to_have_attribute("href", live.base + "/notifications/preferences")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(bell).to_have_attribute("aria-expanded", "false")
    assert shadow(page, "tenantd-inbox", "r => r.activeElement?.getAttribute('part')") == "bell"

    # A click elsewhere on the page closes it too.
    bell.click()
    expect(dialog).to_be_visible()
    page.locator("main").click(position={"x": 5, "y": 200})
    expect(dialog).to_be_hidden()
    expect(bell).to_have_attribute("aria-expanded", "false")

    # Mark one read: the server's state changes, the count follows.
    bell.click()
    dialog.get_by_role("button", name="Mark as read: Ping 1").click()
    expect(page.get_by_role("button", name="Notifications, 1 unread")).to_be_visible()
    page_items = api(page, live, "/api/v1/notifications")["items"]
    status = {item["title"]: item["status"] for item in page_items}
    assert status == {"Ping 1": "read", "Ping 2": "unread"}, status

    # Sent meanwhile: over SSE, no reload; the count and the list follow.
    send(live, user_id, 3)
    expect(page.get_by_role("button", name="Notifications, 2 unread")).to_be_visible()
    expect(items).to_have_count(3)
    expect(items.first).to_contain_text("Ping 3")
    shoot(page, "tenantd-inbox", "inbox", shots)

    # Mark all read.
    dialog.get_by_role("button", name="Mark all as read").click()
    expect(page.get_by_role("button", name="Notifications, no unread")).to_be_visible()
    expect(inbox.locator(".badge")).to_be_hidden()
    assert api(page, live, "/api/v1/notifications/unread-count")["count"] == 0
    page.keyboard.press("Escape")

    # The theme: the page's --tenantd-accent reaches the shadow DOM.
    accent = shadow(
        page,
        "tenantd-user-button",
        "r => getComputedStyle(r.querySelector('.avatar')).backgroundColor",
    )
    assert accent == ACCENT

    # The account switcher: a listbox of the memberships; picking one switches on the server.
    switcher = page.locator("tenantd-account-switcher")
    expect(switcher).to_have_attribute("data-account", first["id"])
    toggle = page.get_by_role("button", name=f"Account: {first['name']}. Switch account")
    toggle.click()
    listbox = page.get_by_role("listbox", name="Accounts")
    expect(listbox).to_be_visible()
    expect(listbox.get_by_role("option")).to_have_count(2)
    expect(listbox.get_by_role("option", selected=True)).to_contain_text(first["name"])
    # Tab leaves the list for "Manage accounts", then the element: the list closes.
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(listbox).to_be_hidden()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert shadow(page, "tenantd-inbox", "r => r.activeElement?.getAttribute('part')") == "bell"
    toggle.click()
    shoot(page, "tenantd-account-switcher", "account-switcher", shots)
    page.keyboard.press("ArrowDown")  # from the selected option to the other one
    focused = shadow(page, "tenantd-account-switcher", "r => r.activeElement?.dataset.id")
    assert focused == second_id
    page.keyboard.press("Enter")
    expect(switcher).to_have_attribute("data-account", second_id)
    expect(
        page.get_by_role("button", name="Account: Globex Research. Switch account")
    ).to_be_visible()
    assert api(page, live, "/api/v1/users/me")["account"]["id"] == second_id

    # Every control in the three elements has a name a screen reader reads out.
    unnamed = page.evaluate(
        """() => [...document.querySelectorAll("tenantd-inbox, tenantd-user-button,"
                + " tenantd-account-switcher")]
            .flatMap((host) => [...host.shadowRoot.querySelectorAll(
                "button, a, [role=option], [role=menuitem]")])
            .filter((c) => !(c.getAttribute("aria-label") || c.textContent).trim())
            .map((c) => c.outerHTML)"""
    )
    assert unnamed == []

    # The user button: initials, name and email, profile and security, sign out (a menu).
    user_button = page.get_by_role("button", name="Account menu for Ada Lovelace")
    expect(page.locator("tenantd-user-button .avatar").first).to_have_text("AL")
    user_button.click()
    menu = page.get_by_role("menu", name="Ada Lovelace")
    expect(menu).to_be_visible()
    expect(menu.get_by_role("menuitem", name="Profile")).to_have_attribute(
        "href", live.base + "/account"
    )
    expect(menu.get_by_role("menuitem", name="Security")).to_have_attribute(
        "href", live.base + "/account#mfa"
    )
    expect(page.locator("tenantd-user-button .email")).to_have_text(me["user"]["email"])
    assert shadow(page, "tenantd-user-button", "r => r.activeElement?.textContent") == "Profile"
    shoot(page, "tenantd-user-button", "user-button", shots)
    menu.get_by_role("menuitem", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in")).to_have_attribute("href", live.base + "/login")
    expect(inbox).to_be_hidden()
    expect(switcher).to_be_hidden()
    assert api(page, live, "/api/v1/users/me")["user"] is None


def test_a_signed_out_visitor_sees_a_sign_in_link_only(
    page: Page, live: LiveServer, app_port: int
) -> None:
    set_page(app_page(live.base))
    page.goto(f"http://app.{DOMAIN}:{app_port}/")
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    expect(page.locator("tenantd-inbox")).to_be_hidden()
    expect(page.locator("tenantd-account-switcher")).to_be_hidden()
    assert page.get_by_role("button").count() == 0


def test_the_inbox_catches_up_when_its_stream_reconnects(
    page: Page, live: LiveServer, migrated: str, app_port: int
) -> None:
    """Last in the module (it restarts the module's server): what changed while the stream was
    down (here: everything read from another tab, which no stream event tells) shows once the
    stream is back, without a reload."""
    app = f"http://app.{DOMAIN}:{app_port}"
    set_page(app_page(live.base))
    me = signed_up(page, live, app, unique_email("reconnect"))
    send(live, me["user"]["id"], 1)
    send(live, me["user"]["id"], 2)
    page.goto(app + "/")
    inbox = page.locator("tenantd-inbox")
    expect(inbox).to_have_attribute("data-stream", "open")
    expect(page.get_by_role("button", name="Notifications, 2 unread")).to_be_visible()

    other = page.context.new_page()
    other.goto(app + "/")
    assert api(other, live, "/api/v1/notifications/read-all", "POST")["updated"] == 2
    live.stop()
    expect(inbox).to_have_attribute("data-stream", "retry")
    restarted = start_server(
        migrated, live.mail_dir.parent, port=urlsplit(live.base).port, **live.env
    )
    try:
        expect(inbox).to_have_attribute("data-stream", "open", timeout=WAIT * 2000)
        expect(page.get_by_role("button", name="Notifications, no unread")).to_be_visible()
        page.get_by_role("button", name="Notifications, no unread").click()
        items = page.get_by_role("dialog", name="Notifications").get_by_role("listitem")
        expect(items).to_have_count(2)
        expect(items.first).to_have_attribute("data-status", "read")
    finally:
        restarted.stop()
