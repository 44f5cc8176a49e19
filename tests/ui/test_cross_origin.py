"""Cross-origin browsers in Chromium: the deployment docs/cross-origin.md describes, with
tenantd on `auth.example.test` and the app on its sibling `app.example.test` (Chromium maps
both to 127.0.0.1). From the app's page: sign-up, verification and sign-in with credentialed
fetches (preflighted), the browser module imported from tenantd's /static, `/me`, live
notifications over SSE, the access cookie reaching the app's own server
(SESSION_COOKIE_DOMAIN), sign-out; docs/cross-origin.md's page script (`cross-origin-page`)
runs as written; the stream survives a restart of tenantd. From an unlisted origin the same
calls are blocked."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.docs.snippets import snippet
from tests.helpers import PASSWORD
from tests.ui.live import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MISSING_CHROMIUM,
    SIBLING_DOMAIN,
    WAIT,
    LiveServer,
    sibling_server,
    start_server,
    unique_email,
)

DOMAIN = SIBLING_DOMAIN
PAGE = (
    b"<!doctype html><html><head><title>App</title></head>"
    b'<body><p id="who"></p><div id="inbox"></div></body></html>'
)
PLACEHOLDER = "https://auth.example.com"


class AppHandler(BaseHTTPRequestHandler):
    """The app's own server: a page, and `/whoami` telling which cookies reached it."""

    def do_GET(self) -> None:
        if self.path == "/whoami":
            names = sorted(
                part.split("=", 1)[0].strip()
                for part in (self.headers.get("Cookie") or "").split(";")
                if "=" in part
            )
            body, kind = json.dumps({"cookies": names}).encode(), "application/json"
        else:
            body, kind = PAGE, "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        return


@pytest.fixture(scope="module")
def app_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), AppHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def live(
    migrated: str, tmp_path_factory: pytest.TempPathFactory, app_port: int
) -> Iterator[LiveServer]:
    with sibling_server(migrated, tmp_path_factory.mktemp("cross-origin"), app_port) as server:
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
def app_page(browser: Browser, app_port: int) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(30_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def call(page: Page, url: str, method: str = "GET", body: object = None) -> dict[str, object]:
    """A credentialed fetch from the page: `{status, body}`, or `{blocked: message}` when the
    browser refuses to hand the answer to the page (no CORS for this origin)."""
    result: dict[str, object] = page.evaluate(
        """async ([url, method, body]) => {
            const init = { method, credentials: "include", headers: {} };
            if (body !== null) {
                init.body = JSON.stringify(body);
                init.headers["Content-Type"] = "application/json";
            }
            try {
                const response = await fetch(url, init);
                return { status: response.status, body: await response.json() };
            } catch (error) {
                return { blocked: String(error) };
            }
        }""",
        [url, method, body],
    )
    return result


def verification_token(server: LiveServer, address: str) -> str:
    link = server.mail_to(address, "/verify-email?token=")
    found = re.search(r"token=([^&\s]+)", link)
    assert found, link
    return found.group(1)


def test_an_app_on_a_sibling_subdomain_signs_in_and_goes_live(
    app_page: Page, live: LiveServer, app_port: int
) -> None:
    app = f"http://app.{DOMAIN}:{app_port}"
    page = app_page
    page.goto(app + "/")
    address = unique_email("cross")

    # Sign up and verify from the app's page (JSON posts: preflighted, then credentialed).
    registered = call(
        page, live.url("/auth/register"), "POST", {"email": address, "password": PASSWORD}
    )
    assert registered.get("status") in (200, 201, 202), registered
    token = verification_token(live, address)
    verified = call(page, live.url("/auth/verify-email"), "POST", {"token": token})
    assert verified.get("status") == 200, verified

    # The browser module, imported from tenantd's /static (a CORS request), reads /me.
    who = page.evaluate(
        """async (base) => {
            const tenantd = await import(base + "/static/tenantd.js");
            tenantd.configure({ baseUrl: base });
            window.tenantd = tenantd;
            return (await tenantd.me()).user;
        }""",
        live.base,
    )
    assert who["email"] == address, who

    # The access cookie (Domain=example.test) reaches the app's own server; the refresh
    # cookie stays with tenantd.
    cookies = page.evaluate("fetch('/whoami').then(r => r.json())")["cookies"]
    assert "auth_token" in cookies and "refresh_token" not in cookies, cookies

    # The manual's page script, as written, in another tab of the app.
    script = snippet("cross-origin-page").code
    assert PLACEHOLDER in script
    tab = page.context.new_page()
    tab.goto(app + "/")
    tab.add_script_tag(content=script.replace(PLACEHOLDER, live.base), type="module")
    tab.wait_for_function(
        "(address) => document.querySelector('#who').textContent === address", arg=address
    )

    # Live notifications over SSE, cross-origin with credentials.
    page.evaluate(
        """() => new Promise((resolve) => {
            window.items = [];
            window.stream = window.tenantd.notifications.subscribe(
                (item) => window.items.push(item),
                { onState: (state) => { if (state === "open") resolve(); } },
            );
        })"""
    )
    payload = json.dumps({"n": 7})
    live.cli("notify", "send", "ping.simple", "--user", who["id"], "--payload", payload)
    page.wait_for_function("window.items.length > 0", timeout=WAIT * 1000)
    assert page.evaluate("window.items[0].title") == "Ping 7"
    tab.wait_for_function("document.querySelector('#inbox').textContent.includes('Ping 7')")
    tab.close()
    assert page.evaluate("window.tenantd.notifications.unreadCount()") == 1

    # Sign out from the app: tenantd's session ends, /me is anonymous again.
    page.evaluate("window.stream.close(); window.tenantd.logout()")
    page.wait_for_function(
        "window.tenantd.me().then(d => d.user === null)", polling=200, timeout=WAIT * 1000
    )
    assert "auth_token" not in page.evaluate("fetch('/whoami').then(r => r.json())")["cookies"]


def test_an_unlisted_origin_is_blocked(
    app_page: Page, browser: Browser, live: LiveServer, app_port: int
) -> None:
    # A signed-in browser (through the listed app) ...
    app = f"http://app.{DOMAIN}:{app_port}"
    page = app_page
    page.goto(app + "/")
    address = unique_email("blocked")
    call(page, live.url("/auth/register"), "POST", {"email": address, "password": PASSWORD})
    verified = call(
        page, live.url("/auth/verify-email"), "POST", {"token": verification_token(live, address)}
    )
    assert verified.get("status") == 200, verified
    assert call(page, live.url("/api/v1/users/me"))["body"]["user"]["email"] == address  # type: ignore[index]

    # ... opens a page of another origin of the same site, which ALLOWED_ORIGINS does not
    # list: the browser sends the cookies, but hands nothing back to that page.
    other = page.context.new_page()
    other.goto(f"http://evil.{DOMAIN}:{app_port}/")
    me = call(other, live.url("/api/v1/users/me"))
    assert "blocked" in me, me
    login = call(
        other, live.url("/api/v1/auth/login"), "POST", {"email": address, "password": PASSWORD}
    )
    assert "blocked" in login, login  # the preflight fails: the POST is never sent
    module = other.evaluate(
        "(base) => import(base + '/static/tenantd.js').then(() => 'loaded', e => 'blocked: ' + e)",
        live.base,
    )
    assert module.startswith("blocked"), module
    # The listed page is still signed in: nothing the other page tried changed the session.
    assert call(page, live.url("/api/v1/users/me"))["body"]["user"]["email"] == address  # type: ignore[index]


def test_the_stream_survives_a_restart_of_tenantd(
    app_page: Page, live: LiveServer, migrated: str, app_port: int
) -> None:
    """Last in the module (it restarts the module's server): the cross-origin SSE stream
    reconnects by itself with Last-Event-ID, and gets what was sent while tenantd was down,
    once."""
    page = app_page
    page.goto(f"http://app.{DOMAIN}:{app_port}/")
    address = unique_email("restart")
    call(page, live.url("/auth/register"), "POST", {"email": address, "password": PASSWORD})
    verified = call(
        page, live.url("/auth/verify-email"), "POST", {"token": verification_token(live, address)}
    )
    assert verified.get("status") == 200, verified
    user_id = page.evaluate(
        """(base) => new Promise(async (resolve) => {
            const tenantd = await import(base + "/static/tenantd.js");
            tenantd.configure({ baseUrl: base });
            const { user } = await tenantd.me();
            window.items = [];
            window.states = [];
            tenantd.notifications.subscribe((item) => window.items.push(item.title), {
                onState: (state) => {
                    window.states.push(state);
                    if (state === "open") resolve(user.id);
                },
            });
        })""",
        live.base,
    )

    def send(n: int) -> None:
        payload = json.dumps({"n": n})
        live.cli("notify", "send", "ping.simple", "--user", user_id, "--payload", payload)

    send(1)
    page.wait_for_function("window.items.includes('Ping 1')", timeout=WAIT * 1000)
    live.stop()
    page.wait_for_function("window.states.includes('retry')", timeout=WAIT * 1000)
    send(2)  # stored while no tenantd runs
    restarted = start_server(
        migrated, live.mail_dir.parent, port=urlsplit(live.base).port, **live.env
    )
    try:
        page.wait_for_function("window.items.includes('Ping 2')", timeout=WAIT * 2000)
        assert page.evaluate("window.items") == ["Ping 1", "Ping 2"]  # nothing twice
        assert page.evaluate("window.states.at(-1)") == "open"
    finally:
        restarted.stop()
