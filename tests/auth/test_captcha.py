"""Bot checks (issue 29): with CAPTCHA_PROVIDER set, registration, the email-code request and
the password-reset request need a `captchaToken` the provider accepts (422 CAPTCHA_FAILED
otherwise), and so does login after repeated failures. The provider is a local fake of the
siteverify endpoint (form-encoded secret, response, remoteip -> JSON {success, ...})."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tenantd.app.settings import load_settings
from tenantd.auth import captcha
from tenantd.identity.settings import SignInSettings
from tenantd.settings import SettingsError
from tests.auth.fake_signin_services import FakeSiteverify
from tests.helpers import data, error

REGISTER = "/auth/register"
EMAIL_CODE = "/api/v1/auth/email-code"
RESET = "/api/v1/auth/password-reset/request"
LOGIN = "/api/v1/auth/login"


@pytest.fixture
async def verifier(aiohttp_server: Any) -> FakeSiteverify:
    fake = FakeSiteverify()
    server: TestServer = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("/siteverify"))
    return fake


@pytest.fixture
def provider() -> str:
    return "turnstile"


@pytest.fixture
def env(env: dict[str, str], verifier: FakeSiteverify, provider: str) -> dict[str, str]:
    env.update(
        {
            "CAPTCHA_PROVIDER": provider,
            "CAPTCHA_SECRET": verifier.secret,
            "CAPTCHA_VERIFY_URL": verifier.url,
            "CAPTCHA_SITE_KEY": "site-key-1",
            "MAGIC_LINK_ENABLED": "true",
        }
    )
    return env


def body_for(path: str) -> dict[str, str]:
    if path == REGISTER:
        return {"email": "ada@example.com", "password": "a long enough passphrase"}
    return {"email": "ada@example.com"}


@pytest.mark.parametrize("provider", ["turnstile", "hcaptcha", "recaptcha"])
@pytest.mark.parametrize("path", [REGISTER, EMAIL_CODE, RESET])
async def test_guarded_requests_need_an_accepted_token(
    path: str, client: Any, verifier: FakeSiteverify
) -> None:
    missing = await client.post(path, json=body_for(path))
    await error(missing, 422, "CAPTCHA_FAILED")
    assert verifier.calls == []  # nothing to ask without a token
    refused = await client.post(path, json={**body_for(path), "captchaToken": "made-up"})
    await error(refused, 422, "CAPTCHA_FAILED")
    token = verifier.token()
    await data(await client.post(path, json={**body_for(path), "captchaToken": token}))
    # A token is single use at the provider: replaying it is refused.
    replay = await client.post(path, json={**body_for(path), "captchaToken": token})
    await error(replay, 422, "CAPTCHA_FAILED")
    asked = verifier.calls[1]
    assert asked["secret"] == verifier.secret and asked["response"] == token
    assert asked["remoteip"] == "127.0.0.1"


async def test_login_asks_for_a_check_after_three_failures_for_the_address(
    make_client: Any, factory: Any, verifier: FakeSiteverify
) -> None:
    user = await factory.user()
    browser = await make_client()
    for _ in range(captcha.LOGIN_FAILURES_PER_EMAIL):
        wrong = await browser.post(LOGIN, json={"email": user.email, "password": "not it at all"})
        await error(wrong, 401, "INVALID_CREDENTIALS")
    assert verifier.calls == []
    # Now even the right password needs the check, from any browser.
    other = await make_client()
    right = {"email": user.email, "password": user.password}
    await error(await other.post(LOGIN, json=right), 422, "CAPTCHA_FAILED")
    await error(await other.post(LOGIN, json={**right, "captchaToken": "bogus"}), 422)
    # A wrong password with a good token is still just wrong (no oracle through the check).
    wrong_with_token = {**right, "password": "still not it", "captchaToken": verifier.token()}
    await error(await other.post(LOGIN, json=wrong_with_token), 401, "INVALID_CREDENTIALS")
    signed = await data(await other.post(LOGIN, json={**right, "captchaToken": verifier.token()}))
    assert signed["user"]["id"] == str(user.id)
    # Another address is not affected.
    someone = await factory.user()
    await data(await other.post(LOGIN, json={"email": someone.email, "password": someone.password}))


async def test_login_asks_for_a_check_after_many_failures_from_the_client(
    make_client: Any, factory: Any, verifier: FakeSiteverify, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(captcha, "LOGIN_FAILURES_PER_IP", 4)
    browser = await make_client()
    for number in range(4):  # a spray: one try per address, from one client
        sprayed = {"email": f"victim{number}@example.com", "password": "Summer2026!"}
        await error(await browser.post(LOGIN, json=sprayed), 401)
    user = await factory.user()
    right = {"email": user.email, "password": user.password}
    await error(await browser.post(LOGIN, json=right), 422, "CAPTCHA_FAILED")
    await data(await browser.post(LOGIN, json={**right, "captchaToken": verifier.token()}))


async def test_an_unreachable_provider_refuses(
    env: dict[str, str], aiohttp_server: Any, aiohttp_client: Any, migrated: str, db: Any
) -> None:
    from tenantd.app.factory import create_app

    env["CAPTCHA_VERIFY_URL"] = "http://127.0.0.1:9/siteverify"  # connection refused
    server = await aiohttp_server(create_app(load_settings(environ=env), migrated))
    client = await aiohttp_client(server)
    body = {**body_for(RESET), "captchaToken": "anything"}
    await error(await client.post(RESET, json=body), 422, "CAPTCHA_FAILED")


def test_settings_refuse_unknown_providers_and_a_missing_secret(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="CAPTCHA_PROVIDER"):
        load_settings(environ={**env, "CAPTCHA_PROVIDER": "mycaptcha"})
    without_secret = {k: v for k, v in env.items() if k != "CAPTCHA_SECRET"}
    with pytest.raises(SettingsError, match="CAPTCHA_SECRET"):
        load_settings(environ=without_secret)
    settings = load_settings(environ={**env, "CAPTCHA_VERIFY_URL": ""})
    assert settings.section(SignInSettings).captcha_verify_url is None
    assert captcha.provider(settings) == captcha.PROVIDERS["turnstile"]
    assert captcha.PROVIDERS["turnstile"].verify_url == (
        "https://challenges.cloudflare.com/turnstile/v0/siteverify"
    )
    assert captcha.PROVIDERS["hcaptcha"].verify_url == "https://api.hcaptcha.com/siteverify"
    assert captcha.PROVIDERS["recaptcha"].verify_url == (
        "https://www.google.com/recaptcha/api/siteverify"
    )


async def test_behind_a_trusted_proxy_failures_count_per_forwarded_client(
    env: dict[str, str],
    aiohttp_server: Any,
    aiohttp_client: Any,
    migrated: str,
    factory: Any,
    verifier: FakeSiteverify,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every request comes from the proxy: counting its address would ask everyone for a bot
    check after one client's spray. The client is the X-Forwarded-For the proxy vouches for,
    and that address is the `remoteip` the provider is told."""
    from tenantd.app.factory import create_app

    monkeypatch.setattr(captcha, "LOGIN_FAILURES_PER_IP", 2)
    proxied = {**env, "TENANTD_TRUSTED_PROXIES": "127.0.0.1"}
    server = await aiohttp_server(create_app(load_settings(environ=proxied), migrated))
    client = await aiohttp_client(server, headers={"Origin": "http://127.0.0.1:8080"})
    sprayer = {"X-Forwarded-For": "203.0.113.5"}
    for number in range(2):
        sprayed = {"email": f"v{number}@example.com", "password": "Winter2026!"}
        await error(await client.post(LOGIN, json=sprayed, headers=sprayer), 401)
    user = await factory.user()
    right = {"email": user.email, "password": user.password}
    await error(await client.post(LOGIN, json=right, headers=sprayer), 422, "CAPTCHA_FAILED")
    someone_else = {"X-Forwarded-For": "198.51.100.7"}
    await data(await client.post(LOGIN, json=right, headers=someone_else))
    token = {**right, "captchaToken": verifier.token()}
    await data(await client.post(LOGIN, json=token, headers=sprayer))
    assert verifier.calls[-1]["remoteip"] == "203.0.113.5"
