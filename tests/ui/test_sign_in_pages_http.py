"""The sign-in pages of issue 29 over plain HTTP (the no-JavaScript path): sign-in by email
code and by the mail's link (its GET spends nothing), the MFA step after a code, and the bot
check's widget on the guarded forms, with the Content-Security-Policy that lets it load."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tenantd.bundle import DOMAINS
from tests.auth.fake_signin_services import FakeSiteverify
from tests.auth.test_email_code import last_mail
from tests.factories import Factory
from tests.mfa.helpers import claims, cookie, user_with_totp
from tests.ui.test_mfa_pages import alert, token_in
from tests.ui.test_pages_http import Maker, make  # noqa: F401 (the fixture)

DEFAULT_CSP = (
    "default-src 'self'; img-src 'self' data: https:; style-src 'self' 'unsafe-inline';"
    " script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'"
)


async def request_code(client: Any, address: str, **extra: str) -> str:
    """Post the address on /login/email-code: the page that asks for the code."""
    page = await (await client.get("/login/email-code")).text()
    response = await client.post(
        "/login/email-code",
        data={"csrf": token_in(page, "/login/email-code"), "email": address, **extra},
        allow_redirects=False,
    )
    text = await response.text()
    assert response.status == 200, text
    await client.server.app[DOMAINS].jobs.drain(10)
    return text


async def test_sign_in_with_a_code_on_the_pages(
    make: Maker,  # noqa: F811
    factory: Factory,
    mail_dir: Path,
) -> None:
    client = await make(MAGIC_LINK_ENABLED="true")
    login = await (await client.get("/login")).text()
    assert 'href="/login/email-code"' in login and 'name="password"' in login
    user = await factory.user()
    page = await request_code(client, user.email)
    assert "a code and a link are on their way" in page
    code, _ = last_mail(mail_dir, user.email)
    action = "/login/email-code/verify"
    wrong = await client.post(
        action,
        data={"csrf": token_in(page, action), "email": user.email, "code": "000000"},
        allow_redirects=False,
    )
    again = await wrong.text()
    assert wrong.status == 422 and alert(again)
    response = await client.post(
        action,
        data={"csrf": token_in(again, action), "email": user.email, "code": code},
        allow_redirects=False,
    )
    assert response.status == 303 and response.headers["Location"] == "/notifications"
    assert claims(client)["amr"] == ["email"]


async def test_a_code_of_a_user_with_a_factor_leads_to_the_mfa_step(
    make: Maker,  # noqa: F811
    factory: Factory,
    db: Any,
    mail_dir: Path,
    make_client: Any,
    settings: Any,
) -> None:
    user, _ = await user_with_totp(factory, make_client, db, settings)
    client = await make(MAGIC_LINK_ENABLED="true")
    page = await request_code(client, user.email)
    code, _ = last_mail(mail_dir, user.email)
    action = "/login/email-code/verify"
    response = await client.post(
        action,
        data={"csrf": token_in(page, action), "email": user.email, "code": code, "next": "/a"},
        allow_redirects=False,
    )
    assert response.status == 303
    assert response.headers["Location"].startswith("/login/mfa?ticket=")
    assert cookie(client, "auth_token") is None and cookie(client, "mfa_binding")


async def test_the_links_get_spends_nothing_and_its_button_signs_in(
    make: Maker,  # noqa: F811
    db: Any,
    mail_dir: Path,
) -> None:
    client = await make(MAGIC_LINK_ENABLED="true")
    await request_code(client, "newcomer@example.com")
    _, token = last_mail(mail_dir, "newcomer@example.com")
    for _ in range(3):  # a mail scanner fetching the link, then the person
        page = await (await client.get(f"/email-code?token={token}")).text()
    assert await db.fetch_val("SELECT count(*) FROM email_codes") == 1
    assert cookie(client, "auth_token") is None
    response = await client.post(
        "/email-code",
        data={"csrf": token_in(page, "/email-code"), "token": token},
        allow_redirects=False,
    )
    assert response.status == 303 and response.headers["Location"] == "/notifications"
    assert cookie(client, "auth_token")
    assert await db.fetch_val("SELECT count(*) FROM email_codes") == 0


async def test_pages_of_sign_in_by_email_are_absent_when_off(make: Maker) -> None:  # noqa: F811
    client = await make()
    login = await (await client.get("/login")).text()
    assert "/login/email-code" not in login
    assert (await client.get("/login/email-code")).status == 404
    assert (await client.get("/email-code?token=x")).status == 404


@pytest.fixture
async def verifier(aiohttp_server: Any) -> FakeSiteverify:
    fake = FakeSiteverify()
    server: TestServer = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("/siteverify"))
    return fake


async def test_the_bot_check_widget_is_on_the_guarded_forms(
    make: Maker,  # noqa: F811
    verifier: FakeSiteverify,
) -> None:
    plain = await make(MAGIC_LINK_ENABLED="true")
    response = await plain.get("/signup")
    assert response.headers["Content-Security-Policy"] == DEFAULT_CSP
    assert 'data-testid="captcha"' not in await response.text()

    client = await make(
        MAGIC_LINK_ENABLED="true",
        CAPTCHA_PROVIDER="hcaptcha",
        CAPTCHA_SECRET=verifier.secret,
        CAPTCHA_VERIFY_URL=verifier.url,
        CAPTCHA_SITE_KEY="site-key-1",
    )
    for path in ("/signup", "/login", "/reset-password", "/login/email-code"):
        response = await client.get(path)
        page = await response.text()
        assert '<div class="h-captcha" data-sitekey="site-key-1"></div>' in page, path
        assert '<script src="https://js.hcaptcha.com/1/api.js" async defer></script>' in page
        policy = response.headers["Content-Security-Policy"]
        script_src = re.search(r"script-src ([^;]*)", policy)
        frame_src = re.search(r"frame-src ([^;]*)", policy)
        assert script_src and "https://*.hcaptcha.com" in script_src.group(1)
        assert frame_src and "https://*.hcaptcha.com" in frame_src.group(1)
        assert "frame-ancestors 'none'" in policy

    # The widget's hidden field carries the token the page passes on to the action.
    page = await (await client.get("/signup")).text()
    form = {"email": "ed@example.com", "password": "a long enough passphrase"}
    refused = await client.post(
        "/signup", data={"csrf": token_in(page, "/signup"), **form}, allow_redirects=False
    )
    assert refused.status == 422
    assert alert(await refused.text()) == "Complete the bot check and try again."
    page = await (await client.get("/signup")).text()
    accepted = await client.post(
        "/signup",
        data={"csrf": token_in(page, "/signup"), **form, "h-captcha-response": verifier.token()},
        allow_redirects=False,
    )
    assert accepted.status == 303, await accepted.text()
    assert verifier.calls[-1]["remoteip"] == "127.0.0.1"


async def test_the_pages_show_the_breach_warning(
    make: Maker,  # noqa: F811
    aiohttp_server: Any,
) -> None:
    from tests.auth.fake_signin_services import FakePwned

    pwned = FakePwned()
    pwned.add("password1234", 12)
    server: TestServer = await aiohttp_server(pwned.app())
    url = str(server.make_url("")).rstrip("/")
    warned = await make(PASSWORD_BREACH_CHECK="warn", PWNED_PASSWORDS_URL=url)
    page = await (await warned.get("/signup")).text()
    form = {"email": "fay@example.com", "password": "password1234"}
    response = await warned.post("/signup", data={"csrf": token_in(page, "/signup"), **form})
    inbox = await response.text()
    assert response.status == 200 and 'data-testid="breach-warning"' in inbox

    blocked = await make(PASSWORD_BREACH_CHECK="block", PWNED_PASSWORDS_URL=url)
    page = await (await blocked.get("/signup")).text()
    form = {"email": "gus@example.com", "password": "password1234"}
    refused = await blocked.post(
        "/signup", data={"csrf": token_in(page, "/signup"), **form}, allow_redirects=False
    )
    text = await refused.text()
    assert refused.status == 422 and "appears in a known data breach" in text
