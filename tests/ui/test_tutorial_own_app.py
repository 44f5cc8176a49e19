"""docs/tutorial-own-app.md followed in Chromium: tenantd served with the page's variables
(`tutorial-env`, on free ports instead of 8080 and 3000), a user signed up on the hosted
pages, the page's Node backend (`tutorial-backend`) and its page (`tutorial-page`) run as
written; the button sends a notification through the backend and the inbox component shows it
live over SSE.

The backend's `events.mjs` (`tutorial-events`) defines its event with the declarative event
types API; until that API is part of this branch the backend here imports a stand-in
`events.mjs` naming the test suite's Python-defined `ping.simple`, and the page's `events.mjs`
is only checked by Node's parser (`node --check`)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.docs.snippets import snippet
from tests.ui.live import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MISSING_CHROMIUM,
    REPO_ROOT,
    WAIT,
    LiveServer,
    free_port,
    sign_up,
    start_server,
    unique_email,
)

STAND_IN_EVENTS = (
    'export const TASK_ASSIGNED = "ping.simple"; // a Python-defined event of the test suite\n'
    "export async function defineEvents() {}\n"
)


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not on PATH: install Node.js 18+ to run the tutorial's backend")
    return found


def ported(code: str, tenantd: int, app: int) -> str:
    """A snippet with the test's ports for the tutorial's 8080 (tenantd) and 3000 (the app)."""
    assert "localhost:8080" in code or "listen(3000" in code, code[:200]
    return (
        code.replace("localhost:8080", f"localhost:{tenantd}")
        .replace("localhost:3000", f"localhost:{app}")
        .replace("listen(3000", f"listen({app}")
    )


def tutorial_env(tenantd: int, app: int) -> dict[str, str]:
    """The `export NAME=value` lines of the tutorial's first step."""
    code = ported(snippet("tutorial-env").code, tenantd, app)
    found = dict(re.findall(r"^export (\w+)=(\S+)$", code, re.M))
    assert set(found) == {"PUBLIC_BASE_URL", "ALLOWED_ORIGINS"}, found
    assert "scripts/run" in code
    return found


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    return free_port(), free_port()


@pytest.fixture(scope="module")
def live(
    migrated: str, tmp_path_factory: pytest.TempPathFactory, ports: tuple[int, int]
) -> Iterator[LiveServer]:
    tenantd, app = ports
    env = tutorial_env(tenantd, app)
    server = start_server(migrated, tmp_path_factory.mktemp("tutorial"), port=tenantd, **env)
    try:
        yield dataclasses.replace(server, base=env["PUBLIC_BASE_URL"])
    finally:
        server.stop()


@pytest.fixture(scope="module")
def backend(
    live: LiveServer, ports: tuple[int, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The tutorial's app folder, its backend running: the app's URL."""
    tenantd, app = ports
    folder = tmp_path_factory.mktemp("acme")
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "tenantd-client").symlink_to(REPO_ROOT / "clients" / "js")
    (folder / "package.json").write_text('{"name": "acme", "type": "module"}\n')
    (folder / "events.mjs").write_text(STAND_IN_EVENTS)
    (folder / "backend.mjs").write_text(ported(snippet("tutorial-backend").code, tenantd, app))
    (folder / "index.html").write_text(ported(snippet("tutorial-page").code, tenantd, app))
    token = live.cli(
        "api-keys", "create", "--name", "acme-backend", "--scopes", "notifications:send"
    )
    log = folder / "backend.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [node(), "backend.mjs"],
            cwd=folder,
            env={**os.environ, "TENANTD_API_KEY": token.strip()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://localhost:{app}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{app}/", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("backend.mjs did not start:\n" + log.read_text()) from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP localhost 127.0.0.1"],
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


def test_the_event_definition_parses(tmp_path: Path) -> None:
    code = snippet("tutorial-events").code
    assert "/api/v1/notifications/event-types/" in code and '"PUT"' in code
    for field in ("payloadSchema", "defaultChannels", "label", "inApp", "dedup"):
        assert field in code, field
    (tmp_path / "events.mjs").write_text(code)
    checked = subprocess.run(
        [node(), "--check", "events.mjs"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


def test_the_tutorial_app_gets_its_notification_live(
    page: Page, live: LiveServer, backend: str
) -> None:
    address = unique_email("tutorial")
    sign_up(page, live, address)  # step 2, on tenantd's hosted pages

    page.goto(backend + "/")  # step 5
    inbox = page.locator("tenantd-inbox")
    expect(inbox).to_have_attribute("data-stream", "open")
    expect(page.get_by_role("button", name="Notifications, no unread")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("^Account menu for"))).to_be_visible()

    page.get_by_role("button", name="Assign me a task").click()
    expect(page.locator("#result")).to_have_text("Assigned: Review the Q3 report")
    bell = page.get_by_role("button", name="Notifications, 1 unread")
    expect(bell).to_be_visible()  # over SSE, no reload
    bell.click()
    items = page.get_by_role("dialog", name="Notifications").get_by_role("listitem")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Ping 0")  # the stand-in event's title

    # Signed out, the backend refuses the call and the page says so.
    page.get_by_role("button", name=re.compile("^Account menu for")).click()
    page.get_by_role("menuitem", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    page.get_by_role("button", name="Assign me a task").click()
    expect(page.locator("#result")).to_have_text("Sign in first (the button at the top right).")
