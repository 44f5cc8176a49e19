"""docs/tutorial-own-app.md followed in Chromium: tenantd served with the page's variables
(`tutorial-env`, on free ports instead of 8080 and 3000), a user signed up on the hosted
pages, the page's Node backend (`tutorial-backend`) and its page (`tutorial-page`) run as
written; the button sends a notification through the backend and the inbox component shows it
live over SSE.

The backend's `events.mjs` (`tutorial-events`) runs as written too: it defines `task.assigned`
with the declarative event types API at the backend's start-up, and the notification shown is
rendered from that definition's templates."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

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


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not on PATH: install Node.js 18+ to run the tutorial's backend")
    return found


def ported(code: str, tenantd: int, app: int) -> str:
    """A snippet with the test's ports for the tutorial's 8080 (tenantd) and 3000 (the app)."""
    assert "localhost:8080" in code or "localhost:3000" in code, code[:200]
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
    (folder / "events.mjs").write_text(ported(snippet("tutorial-events").code, tenantd, app))
    (folder / "backend.mjs").write_text(ported(snippet("tutorial-backend").code, tenantd, app))
    (folder / "index.html").write_text(ported(snippet("tutorial-page").code, tenantd, app))
    token = live.cli(
        "api-keys",
        "create",
        "--name",
        "acme-backend",
        "--scopes",
        "notifications:send,notifications:manage",
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


def mail_with_subject(live: LiveServer, address: str, subject: str) -> str:
    """The text of the first mail to `address` with `subject` (polled until it is written)."""
    deadline = time.monotonic() + WAIT
    while True:
        for path in live.mail_dir.glob("*.eml"):
            message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            if address.lower() in str(message["To"]).lower() and message["Subject"] == subject:
                body = message.get_body(preferencelist=("plain",))
                return body.get_content() if body is not None else ""
        if time.monotonic() > deadline:
            raise AssertionError(f"no mail to {address} with the subject {subject!r}")
        time.sleep(0.1)


def test_the_tutorial_app_gets_its_notification_live(
    page: Page, live: LiveServer, backend: str, ports: tuple[int, int]
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
    expect(items.first).to_contain_text("Grace assigned you a task")  # inApp.title
    expect(items.first).to_contain_text("Review the Q3 report")  # inApp.body
    task_link = items.first.get_by_role("link", name="Open the task")
    expect(task_link).to_have_attribute(
        "href", re.compile(rf"^http://localhost:{ports[1]}/tasks/[0-9a-f-]{{36}}$")
    )
    expect(
        items.first.get_by_role("button", name="Mark as read: Grace assigned you a task")
    ).to_be_visible()
    dialog = page.get_by_role("dialog", name="Notifications")
    expect(dialog.get_by_role("link", name="Notification preferences")).to_be_visible()
    mail = mail_with_subject(live, address, "New task: Review the Q3 report")
    assert "Grace assigned you Review the Q3 report." in mail

    # The preferences page has the event's own line, under its label.
    page.goto(live.url("/notifications/preferences"))
    expect(page.get_by_text("Task assigned", exact=True)).to_be_visible()

    # Signed out, the backend refuses the call and the page says so.
    page.goto(backend + "/")
    page.get_by_role("button", name=re.compile("^Account menu for")).click()
    page.get_by_role("menuitem", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in")).to_be_visible()
    page.get_by_role("button", name="Assign me a task").click()
    expect(page.locator("#result")).to_have_text("Sign in first (the button at the top right).")
