"""Passkeys on the hosted pages in Chromium (Chrome DevTools Protocol's virtual authenticator):
"Add a passkey" on /account shows the first factor's recovery codes, then a password sign-in
asks for the second factor on /login/mfa and "Use a passkey" finishes it (amr hwk)."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, async_playwright, expect

from tenantd.app import create_app
from tenantd.db import Database
from tenantd.settings import Settings
from tests.factories import Factory
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, MISSING_CHROMIUM, screenshots_dir


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


async def test_add_a_passkey_on_the_profile_then_use_it_as_the_second_factor(
    async_browser: Browser, server: TestServer, factory: Factory, env: dict[str, str]
) -> None:
    origin = env["PUBLIC_BASE_URL"]
    user = await factory.user()
    context = await async_browser.new_context(base_url=origin)
    context.set_default_timeout(30_000)
    page = await context.new_page()
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    try:
        await page.goto("/login")
        await page.get_by_label("Email").fill(user.email)
        await page.get_by_label("Password").fill(user.password)
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/notifications**")

        await page.goto("/account")
        await page.get_by_placeholder("Passkey name").fill("Laptop")
        await page.get_by_role("button", name="Add a passkey").click()
        codes = page.locator("[data-new-codes] li")
        await expect(codes).to_have_count(10)
        await page.get_by_role("link", name="OK").click()
        await expect(page.get_by_test_id("passkeys")).to_contain_text("Laptop")
        await expect(page.get_by_test_id("mfa-state")).to_have_text("On")
        await expect(page.get_by_test_id("notice")).to_have_text("Passkey added.")

        await page.get_by_role("button", name="Sign out").first.click()
        await page.wait_for_url("**/login**")
        await page.get_by_label("Email").fill(user.email)
        await page.get_by_label("Password").fill(user.password)
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/login/mfa?ticket=**")
        folder = screenshots_dir()
        await page.screenshot(path=str(folder / "login-mfa-passkey-desktop.png"), full_page=True)
        await page.get_by_role("button", name="Use a passkey").click()
        await page.wait_for_url("**/notifications**")
        token = next(c["value"] for c in await context.cookies() if c["name"] == "auth_token")
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        assert claims["amr"] == ["pwd", "hwk"]
    finally:
        await context.close()
