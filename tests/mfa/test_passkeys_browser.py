"""Passkeys in a real browser: Debian's Chromium driven by Playwright, with the Chrome
DevTools Protocol's virtual authenticator (a discoverable-credential, user-verifying
platform authenticator), on a page served by tenantd's own origin.

Registration, listing and renaming, passwordless sign-in (discoverable credential), the
passkey as the second factor of a password sign-in, reauthentication and removal."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.identity.settings import IdentitySettings
from tenantd.settings import Settings
from tests.factories import Factory
from tests.mfa import passkey_page
from tests.mfa.helpers import add_virtual_authenticator, browser_amr

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP localhost 127.0.0.1",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def port() -> int:
    return _free_port()


@pytest.fixture
def env(env: dict[str, str], port: int) -> dict[str, str]:
    # WebAuthn needs a domain for the relying party id (not an IP): the browser visits
    # http://localhost:PORT; the RP id and origin derive from PUBLIC_BASE_URL.
    origin = f"http://localhost:{port}"
    env.update({"PUBLIC_BASE_URL": origin, "ALLOWED_ORIGINS": origin})
    return env


@pytest.fixture
async def server(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any, port: int
) -> TestServer:
    app = create_app(settings, migrated, extra_routes=[passkey_page.ROUTES])
    return await aiohttp_server(app, port=port)


@pytest.fixture
def chromium() -> str:
    """The browser binary; missing it fails the tests (they must not silently skip)."""
    if not CHROMIUM.exists():
        pytest.fail("Chromium is missing for the passkey browser tests: apt-get install chromium")
    return str(CHROMIUM)


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def _page(browser: Browser, origin: str) -> tuple[BrowserContext, Page]:
    context = await browser.new_context()
    page = await context.new_page()
    await add_virtual_authenticator(context, page)
    await page.goto(f"{origin}/test/passkeys")
    await page.wait_for_selector("body[data-ready=true]")  # the module script has run
    return context, page


async def test_passkey_register_sign_in_second_factor_reauth_delete(
    browser: Browser, server: TestServer, factory: Factory, db: Database, env: dict[str, str]
) -> None:
    settings = load_settings(environ=env)
    assert settings.section(IdentitySettings).webauthn_rp_id == "localhost"
    origin = env["PUBLIC_BASE_URL"]
    user = await factory.user()
    context, page = await _page(browser, origin)
    login = await page.evaluate(
        "([email, password]) => api('/api/v1/auth/login', {email, password})",
        [user.email, user.password],
    )
    assert login["status"] == 200, login

    registered = await page.evaluate("registerPasskey('Laptop')")
    assert registered["status"] == 201, registered
    passkey = registered["body"]["data"]["passkey"]
    assert passkey["name"] == "Laptop"
    assert len(registered["body"]["data"]["recoveryCodes"]) == 10  # the first factor
    stored = await db.fetch_one("SELECT * FROM passkeys WHERE user_id = %(u)s", {"u": user.id})
    assert stored is not None and stored["public_key"]

    listed = await page.evaluate("api('/api/v1/auth/passkeys', undefined, 'GET')")
    assert [p["name"] for p in listed["body"]["data"]] == ["Laptop"]
    assert (
        listed["body"]["data"][0]["createdAt"] and listed["body"]["data"][0]["lastUsedAt"] is None
    )
    renamed = await page.evaluate(
        f"api('/api/v1/auth/passkeys/{passkey['id']}', {{name: 'Work laptop'}}, 'PATCH')"
    )
    assert renamed["body"]["data"]["name"] == "Work laptop"
    status = await page.evaluate("api('/api/v1/auth/mfa/status', undefined, 'GET')")
    assert status["body"]["data"]["methods"] == ["passkey", "recoveryCode"]

    # Passwordless: sign out, then sign in with the discoverable passkey alone.
    assert (await page.evaluate("api('/api/v1/auth/logout')"))["status"] == 200
    signed = await page.evaluate("passkeySignIn()")
    assert signed["status"] == 200, signed
    assert signed["body"]["data"]["user"]["id"] == str(user.id)
    assert await browser_amr(context) == ["hwk"]
    me = await page.evaluate("api('/api/v1/users/me', undefined, 'GET')")
    assert me["body"]["user"]["id"] == str(user.id)
    used = await db.fetch_one("SELECT * FROM passkeys WHERE user_id = %(u)s", {"u": user.id})
    assert used["last_used_at"] is not None

    # A password sign-in now needs the second factor: the passkey answers it.
    assert (await page.evaluate("api('/api/v1/auth/logout')"))["status"] == 200
    step = await page.evaluate(
        "([email, password]) => api('/api/v1/auth/login', {email, password})",
        [user.email, user.password],
    )
    assert step["body"]["data"]["mfaRequired"] is True
    assert step["body"]["data"]["methods"] == ["passkey", "recoveryCode"]
    verified = await page.evaluate("(t) => passkeySecondFactor(t)", step["body"]["data"]["ticket"])
    assert verified["status"] == 200, verified
    assert await browser_amr(context) == ["pwd", "hwk"]

    # Reauthenticate with the passkey, then remove it (step-up holds).
    reauth = await page.evaluate("passkeyReauth()")
    assert reauth["status"] == 200, reauth
    assert reauth["body"]["data"]["amr"] == ["pwd", "hwk"]
    removed = await page.evaluate(
        f"api('/api/v1/auth/passkeys/{passkey['id']}', undefined, 'DELETE')"
    )
    assert removed["status"] == 200, removed
    status = await page.evaluate("api('/api/v1/auth/mfa/status', undefined, 'GET')")
    assert status["body"]["data"] == {"enabled": False, "methods": [], "recoveryCodesRemaining": 0}
    await context.close()


async def test_replayed_or_forged_assertions_are_refused(
    browser: Browser, server: TestServer, factory: Factory, db: Database, env: dict[str, str]
) -> None:
    """An assertion is good once (its challenge is spent); one whose clientDataJSON names
    another origin is refused (py_webauthn checks origin and signature)."""
    origin = env["PUBLIC_BASE_URL"]
    user = await factory.user()
    context, page = await _page(browser, origin)
    await page.evaluate(
        "([email, password]) => api('/api/v1/auth/login', {email, password})",
        [user.email, user.password],
    )
    assert (await page.evaluate("registerPasskey('Key')"))["status"] == 201
    await page.evaluate("api('/api/v1/auth/logout')")
    replayed = await page.evaluate(
        """async () => {
      const options = (await api('/api/v1/auth/passkeys/authenticate/options', {})).body.data;
      const credential = await getAssertion(options);
      const first = await api('/api/v1/auth/passkeys/authenticate/verify', { credential });
      const again = await api('/api/v1/auth/passkeys/authenticate/verify', { credential });
      return [first.status, again.status];
    }"""
    )
    assert replayed == [200, 401]
    tampered = await page.evaluate(
        """async () => {
      const options = (await api('/api/v1/auth/passkeys/authenticate/options', {})).body.data;
      const c = await navigator.credentials.get({ publicKey: requestOptions(options) });
      const client = JSON.parse(new TextDecoder().decode(c.response.clientDataJSON));
      client.origin = 'https://evil.example';
      const forged = new TextEncoder().encode(JSON.stringify(client));
      return api('/api/v1/auth/passkeys/authenticate/verify', { credential: {
        id: c.id, rawId: enc(c.rawId), type: c.type, clientExtensionResults: {},
        response: { clientDataJSON: enc(forged), authenticatorData:
          enc(c.response.authenticatorData), signature: enc(c.response.signature),
          userHandle: c.response.userHandle ? enc(c.response.userHandle) : null } } });
    }"""
    )
    assert tampered["status"] == 401, tampered
    assert tampered["body"]["error"]["code"] == "INVALID_CREDENTIALS"
    await context.close()
