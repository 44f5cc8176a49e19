"""Passkeys on the hosted pages in Chromium (Chrome DevTools Protocol's virtual authenticator):
"Add a passkey" on /account shows the first factor's recovery codes, then a password sign-in
asks for the second factor on /login/mfa and "Use a passkey" finishes it (amr hwk); on
/login, "Sign in with a passkey" and the email field's autofill (conditional mediation) sign
in with the passkey alone, also into an account that requires MFA."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.settings import Settings
from tests.factories import Factory, UserRecord
from tests.mfa.helpers import add_virtual_authenticator, browser_amr
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, DESKTOP, MISSING_CHROMIUM, PHONE, screenshots_dir


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def port() -> int:
    return _free_port()


@pytest.fixture
def env(env: dict[str, str], port: int) -> dict[str, str]:
    # WebAuthn needs a domain (not an IP) for the relying party id.
    origin = f"http://localhost:{port}"
    env.update({"PUBLIC_BASE_URL": origin, "ALLOWED_ORIGINS": origin, "COOKIE_SECURE": "false"})
    return env


@pytest.fixture
async def server(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any, port: int
) -> TestServer:
    return await aiohttp_server(create_app(settings, migrated), port=port)


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    return CHROMIUM


@pytest.fixture
async def async_browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium),
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP localhost 127.0.0.1"],
        )
        try:
            yield launched
        finally:
            await launched.close()


# Records what the page asks navigator.credentials.get for, then lets the browser answer.
# The virtual authenticator would answer a conditional request at once, as if the user picked
# the passkey from the email field's autofill list: only pages opened with ?test-autofill let
# it; elsewhere the conditional request stays pending until aborted (a user who types).
RECORD_GET = """
window.__webauthnGets = [];
const holdAutofill = !new URLSearchParams(location.search).has("test-autofill");
const realGet = navigator.credentials.get.bind(navigator.credentials);
navigator.credentials.get = (options) => {
  window.__webauthnGets.push({
    mediation: options.mediation || null,
    hasSignal: Boolean(options.signal),
    allowCredentials: (options.publicKey.allowCredentials || []).length,
    userVerification: options.publicKey.userVerification,
  });
  if (holdAutofill && options.mediation === "conditional") {
    return new Promise((_, reject) => options.signal.addEventListener(
      "abort", () => reject(new DOMException("aborted", "AbortError"))));
  }
  return realGet(options);
};
"""
PICK_FROM_AUTOFILL = "test-autofill"


async def _with_authenticator(browser: Browser, origin: str) -> tuple[BrowserContext, Page]:
    """A page whose browser has a platform authenticator that keeps discoverable credentials
    and verifies the user (no prompt: presence is simulated)."""
    context = await browser.new_context(base_url=origin)
    context.set_default_timeout(30_000)
    await context.add_init_script(RECORD_GET)
    page = await context.new_page()
    await add_virtual_authenticator(context, page)
    return context, page


async def _password_sign_in(page: Page, user: UserRecord) -> None:
    await page.goto("/login")
    await page.get_by_label("Email").fill(user.email)
    await page.get_by_label("Password").fill(user.password)
    await page.get_by_role("button", name="Sign in", exact=True).click()


async def _add_passkey(page: Page, user: UserRecord, name: str) -> None:
    await _password_sign_in(page, user)
    await page.wait_for_url("**/notifications**")
    await page.goto("/account")
    await page.get_by_placeholder("Passkey name").fill(name)
    await page.get_by_role("button", name="Add a passkey").click()
    await expect(page.locator("[data-new-codes] li")).to_have_count(10)
    await page.get_by_role("link", name="OK").click()
    await expect(page.get_by_test_id("passkeys")).to_contain_text(name)


async def _sign_out(page: Page) -> None:
    await page.get_by_role("button", name="Sign out").first.click()
    await page.wait_for_url("**/login**")


async def test_add_a_passkey_on_the_profile_then_use_it_as_the_second_factor(
    async_browser: Browser, server: TestServer, factory: Factory, env: dict[str, str]
) -> None:
    user = await factory.user()
    context, page = await _with_authenticator(async_browser, env["PUBLIC_BASE_URL"])
    try:
        await _add_passkey(page, user, "Laptop")
        await expect(page.get_by_test_id("mfa-state")).to_have_text("On")
        await expect(page.get_by_test_id("notice")).to_have_text("Passkey added.")

        await _sign_out(page)
        await _password_sign_in(page, user)
        await page.wait_for_url("**/login/mfa?ticket=**")
        folder = screenshots_dir()
        await page.screenshot(path=str(folder / "login-mfa-passkey-desktop.png"), full_page=True)
        await page.get_by_role("button", name="Use a passkey").click()
        await page.wait_for_url("**/notifications**")
        assert await browser_amr(context) == ["pwd", "hwk"]
    finally:
        await context.close()


async def test_passwordless_sign_in_on_the_login_page(
    async_browser: Browser, server: TestServer, factory: Factory, db: Database, env: dict[str, str]
) -> None:
    """The button and the autofill both sign in with the passkey alone (amr hwk), into an
    account that requires MFA: user verification makes the passkey a second factor too.
    The passkey also confirms a sensitive change on the hosted step-up box."""
    user = await factory.user()
    context, page = await _with_authenticator(async_browser, env["PUBLIC_BASE_URL"])
    try:
        await _add_passkey(page, user, "Laptop")
        await db.execute(
            "UPDATE accounts SET require_mfa = true WHERE id = %(a)s", {"a": user.account_id}
        )
        await _sign_out(page)

        # The email field offers passkeys in its autofill: the page starts a conditional
        # request on load (discoverable credentials: no allowCredentials).
        await page.goto("/login?next=/account")
        email = page.get_by_label("Email")
        assert "webauthn" in (await email.get_attribute("autocomplete") or "").split()
        button = page.get_by_role("button", name="Sign in with a passkey")
        await expect(button).to_be_visible()
        folder = screenshots_dir()
        for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            await page.set_viewport_size(viewport)
            await page.screenshot(path=str(folder / f"login-passkey-{label}.png"), full_page=True)

        await page.wait_for_function("window.__webauthnGets.length > 0")
        assert await page.evaluate("window.__webauthnGets") == [
            {
                "mediation": "conditional",
                "hasSignal": True,
                "allowCredentials": 0,
                "userVerification": "required",
            }
        ]

        # (a) The button: the autofill's pending request is aborted and a modal one made.
        await button.click()
        await page.wait_for_url(lambda url: urlsplit(url).path == "/account")
        assert await browser_amr(context) == ["hwk"]
        me = await (await page.request.get("/api/v1/users/me")).json()
        assert me["user"]["id"] == str(user.id)
        assert me["account"]["id"] == str(user.account_id) and me["account"]["requireMfa"]
        await _sign_out(page)

        # (b) The autofill: the conditional request started on load is answered (the virtual
        # authenticator picks the passkey as a user would in the email field's list).
        await page.goto(f"/login?{PICK_FROM_AUTOFILL}")
        await page.wait_for_url(lambda url: urlsplit(url).path == "/notifications")
        assert await browser_amr(context) == ["hwk"]

        # An hour later, removing the passkey asks to confirm it's you: the passkey does.
        await db.execute(
            "UPDATE session_auth SET auth_time = now() - interval '1 hour' WHERE user_id = %(u)s",
            {"u": user.id},
        )
        await context.clear_cookies(name="auth_token")  # the next page refreshes the session
        await page.goto("/account")
        remove = page.get_by_test_id("passkeys").get_by_role("button", name="Remove")
        await remove.click()
        await expect(page.get_by_test_id("stepup")).to_be_visible()
        await page.get_by_test_id("stepup").screenshot(path=str(folder / "stepup-passkey.png"))
        await page.get_by_role("button", name="Confirm with a passkey").click()
        await page.wait_for_url("**/account?done=reauthed")
        await remove.click()
        await expect(page.get_by_test_id("notice")).to_have_text("Passkey removed.")
        await expect(page.get_by_test_id("passkeys")).not_to_contain_text("Laptop")
    finally:
        await context.close()
