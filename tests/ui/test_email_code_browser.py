"""End to end in Chromium (issue 29): the login page offers sign-in by email beside the
password; the code read from the mail sink signs in, and so does the mail's link (a GET shows
a button; only its POST spends the link)."""

from __future__ import annotations

import email
import email.policy
import re
import time

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.ui.live import DESKTOP, WAIT, LiveServer, shoot, sign_up, unique_email

CODE = re.compile(r"code to sign in: (\d{6})")


@pytest.fixture(scope="module")
def live_env() -> dict[str, str]:
    return {"MAGIC_LINK_ENABLED": "true"}


def code_mails(live: LiveServer, address: str) -> list[str]:
    """The codes mailed to `address`, oldest first."""
    codes = []
    for path in sorted(live.mail_dir.glob("*.eml"), key=lambda p: p.stat().st_mtime):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        if address.lower() not in str(message["To"]).lower():
            continue
        body = message.get_body(preferencelist=("plain",))
        found = CODE.search(body.get_content() if body is not None else "")
        if found:
            codes.append(found.group(1))
    return codes


def mailed_code(live: LiveServer, address: str, *, seen: int = 0) -> str:
    """The code of the first mail to `address` beyond the `seen`th (waits for the job)."""
    deadline = time.monotonic() + WAIT
    while True:
        codes = code_mails(live, address)
        if len(codes) > seen:
            return codes[seen]
        if time.monotonic() > deadline:
            raise AssertionError(f"no code mailed to {address}")
        time.sleep(0.1)


def ask_for_code(page: Page, live: LiveServer, address: str) -> None:
    page.goto(live.url("/login"))
    page.get_by_test_id("email-code").click()
    page.wait_for_url("**/login/email-code**")
    expect(page.get_by_role("heading", name="Sign in with an email code")).to_be_visible()
    page.get_by_label("Email").fill(address)
    page.get_by_role("button", name="Send me a code").click()
    expect(page.get_by_test_id("notice")).to_contain_text("a code and a link are on their way")


def test_sign_in_with_the_mailed_code(browser: Browser, live: LiveServer) -> None:
    address = unique_email("code")
    first = browser.new_context(base_url=live.base, viewport=DESKTOP)
    try:
        sign_up(first.new_page(), live, address)
    finally:
        first.close()

    context = browser.new_context(base_url=live.base, viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(live.url("/login"))
        # Beside the password: both ways in on the one page.
        expect(page.get_by_label("Password")).to_be_visible()
        expect(page.get_by_test_id("email-code")).to_have_text("Email me a sign-in code")
        ask_for_code(page, live, address)
        shoot(page, "email-code")
        code = mailed_code(live, address)

        page.get_by_label("6-digit code").fill(f"{int(code) + 1:06d}"[-6:])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_test_id("error")).to_be_visible()

        page.get_by_label("6-digit code").fill(code)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/notifications**")
        expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)
    finally:
        context.close()


def test_sign_in_with_the_mailed_link_needs_the_button(browser: Browser, live: LiveServer) -> None:
    address = unique_email("link")  # no user yet: the first code signs up, verified
    context = browser.new_context(base_url=live.base, viewport=DESKTOP)
    try:
        page = context.new_page()
        ask_for_code(page, live, address)
        link = live.mail_to(address, "/email-code?token=")
        # A scanner's GET of the link spends nothing.
        scanner = page.request.get(link)
        assert scanner.status == 200
        page.goto(link)
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/notifications**")
        expect(page.get_by_test_id("signed-in-as")).to_contain_text(address)
    finally:
        context.close()
