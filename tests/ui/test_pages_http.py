"""The hosted pages over plain HTTP (no browser): switched off, restyled and overridden by
settings, CSRF refusals, safe redirects, the verification link's GET changing nothing."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.email.templates import SUPPORTED_LOCALES
from tenantd.settings import SettingsError
from tenantd.ui.strings import EN, done_text, oauth_error_text
from tests.auth.test_email_change import link_token, mails_to
from tests.factories import Factory
from tests.helpers import ORIGIN, PASSWORD, eventually
from tests.mfa.helpers import claims, signed_in
from tests.ui.test_mfa_pages import post_form

PAGES = [
    "/signup",
    "/login",
    "/verify-email",
    "/reset-password",
    "/invitations/accept",
    "/account",
    "/accounts",
    "/notifications",
    "/notifications/preferences",
    "/join-requests",
    "/static/tenantd.js",
    "/static/tenantd.d.ts",
    "/static/components.js",
    "/static/components.d.ts",
]
Maker = Callable[..., Awaitable[Any]]


@pytest.fixture
def make(env: dict[str, str], migrated: str, db: Any, aiohttp_client: Any) -> Maker:
    """A client of an app built from `env` plus overrides (Origin: the site's own)."""

    async def build(**overrides: str) -> Any:
        settings = load_settings(environ={**env, **overrides})
        return await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})

    return build


async def form_token(client: Any, path: str, action: str | None = None) -> str:
    """The token of the form posting to `action` (default: the page's own path)."""
    response = await client.get(path)
    assert response.status == 200, path
    form = re.compile(
        rf'action="{re.escape(action or path)}"[^>]*>\s*<input type="hidden" name="csrf"'
        r' value="([0-9a-f]+)"'
    )
    found = form.search(await response.text())
    assert found, (path, action)
    return found.group(1)


async def test_pages_off_answer_the_apis_404(make: Maker) -> None:
    client = await make(TENANTD_UI="false")
    for path in PAGES:
        response = await client.get(path)
        assert response.status == 404, path
        assert (await response.json())["error"]["code"] == "NOT_FOUND"
    # The API is still there.
    response = await client.get("/api/v1/users/me")
    assert response.status == 200


async def test_pages_on_have_labelled_fields_and_action_buttons(make: Maker) -> None:
    client = await make()
    signup = await (await client.get("/signup")).text()
    assert '<label for="f-email">Email</label>' in signup
    assert '<label for="f-password">Password</label>' in signup
    assert 'type="submit">Sign up</button>' in signup
    login = await (await client.get("/login")).text()
    assert 'type="submit">Sign in</button>' in login
    for path in PAGES[6:10]:  # signed-in pages send a visitor to sign in, then back
        response = await client.get(path, allow_redirects=False)
        assert response.status == 303, path
        assert response.headers["Location"].startswith("/login?next=")
    script = await client.get("/static/tenantd.js")
    assert script.status == 200
    assert "export async function me()" in await script.text()
    worker = await client.get("/tenantd-sw.js")
    assert worker.status == 200
    assert worker.headers["Content-Type"].startswith("text/javascript")


async def test_brand_logo_and_accent_restyle_the_pages(make: Maker) -> None:
    client = await make(
        TENANTD_UI_BRAND_NAME="Acme <Cloud>",
        TENANTD_UI_LOGO_URL="https://cdn.example/logo.svg",
        TENANTD_UI_ACCENT_COLOR="#0f766e",
    )
    body = await (await client.get("/login")).text()
    assert "Acme &lt;Cloud&gt;" in body  # escaped, never markup
    assert '<img src="https://cdn.example/logo.svg"' in body
    assert "--accent: #0f766e;" in body


def test_a_bad_accent_colour_is_refused_at_start(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="TENANTD_UI_ACCENT_COLOR"):
        load_settings(environ={**env, "TENANTD_UI_ACCENT_COLOR": "red;}body{x"})


async def test_a_template_is_overridden_from_the_templates_dir(make: Maker, tmp_path: Path) -> None:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "login.html").write_text(
        '{% extends "_auth_base.html" %}{% block card %}<h1>Our own sign-in</h1>{% endblock %}'
    )
    client = await make(TENANTD_UI_TEMPLATES_DIR=str(folder))
    assert "Our own sign-in" in await (await client.get("/login")).text()
    # Other pages keep the shipped templates.
    assert "Create your account" in await (await client.get("/signup")).text()


async def test_forms_need_the_token_of_this_browser_and_this_form(make: Maker) -> None:
    client = await make()
    token = await form_token(client, "/login")
    body = {"email": "nobody@example.com", "password": PASSWORD}
    # No token, a wrong one, or the token of another form: refused before anything runs.
    for bad in ({}, {"csrf": "0" * 64}, {"csrf": await form_token(client, "/signup")}):
        response = await client.post("/login", data={**body, **bad})
        assert response.status == 403
        assert "text/html" in response.headers["Content-Type"]
    # Another origin with a valid token: refused too.
    response = await client.post(
        "/login", data={**body, "csrf": token}, headers={"Origin": "https://evil.example"}
    )
    assert response.status == 403
    # Another browser (no CSRF cookie) cannot reuse this browser's token.
    stranger = await make()
    response = await stranger.post("/login", data={**body, "csrf": token})
    assert response.status == 403
    # The real form with its token gets to the sign-in rule (wrong password: 401 in words).
    response = await client.post("/login", data={**body, "csrf": token})
    assert response.status == 401
    assert EN["code.INVALID_CREDENTIALS"] in await response.text()


async def test_sign_in_goes_back_only_to_this_site(make: Maker, factory: Any) -> None:
    user = await factory.user(password=PASSWORD)
    for target, expected in (
        ("/accounts", "/accounts"),
        ("//evil.example/x", "/notifications"),
        ("https://evil.example/", "/notifications"),
        ("/\\evil.example", "/notifications"),
    ):
        client = await make()
        token = await form_token(client, "/login")
        response = await client.post(
            "/login",
            data={"email": user.email, "password": PASSWORD, "csrf": token, "next": target},
            allow_redirects=False,
        )
        assert response.status == 303
        assert response.headers["Location"] == expected
        assert "auth_token" in response.cookies


async def test_the_verification_links_get_changes_nothing(
    make: Maker, factory: Any, db: Any
) -> None:
    client = await make()
    token = await form_token(client, "/signup")
    address = "scanner@example.com"
    response = await client.post(
        "/signup",
        data={"email": address, "password": PASSWORD, "csrf": token},
        allow_redirects=False,
    )
    assert response.status == 303
    assert response.headers["Location"].startswith("/check-inbox?email=")
    row = await db.fetch_one(
        "SELECT email_verified_at FROM users WHERE email = %(e)s", {"e": address}
    )
    assert row is not None and row["email_verified_at"] is None
    page = await client.get("/verify-email?token=whatever")
    assert page.status == 200
    assert "data-autosubmit" in await page.text()
    row = await db.fetch_one(
        "SELECT email_verified_at FROM users WHERE email = %(e)s", {"e": address}
    )
    assert row is not None and row["email_verified_at"] is None


async def test_validation_errors_are_shown_next_to_their_field(make: Maker) -> None:
    client = await make()
    token = await form_token(client, "/signup")
    response = await client.post(
        "/signup", data={"email": "not an email", "password": "x", "csrf": token}
    )
    assert response.status == 422
    page = await response.text()
    assert 'aria-invalid="true" aria-describedby="e-email"' in page
    assert 'aria-invalid="true" aria-describedby="e-password"' in page
    assert 'value="not an email"' in page  # kept; the password never is


def test_every_done_and_oauth_code_has_words() -> None:
    assert done_text("welcome") == EN["done.welcome"]
    assert done_text("<script>") is None  # an unknown key is never echoed
    assert oauth_error_text("oauth_denied") == EN["oauth.oauth_denied"]
    assert oauth_error_text("made-up") == EN["oauth.unknown"]
    from_templates = set()
    for path in (Path(__file__).parents[2] / "tenantd" / "ui" / "templates").glob("*.html"):
        from_templates.update(re.findall(r"\bt\('([a-z_.]+)'", path.read_text()))
    # Keys built in a template ('role.' ~ role, 'channel.' ~ c): every value has words.
    built = {
        "role.": ("owner", "admin", "member"),
        "channel.": ("in_app", "email", "sse", "web_push"),
        # notification settings (issue 18)
        "frequency.": ("instant", "hourly", "daily"),
        "language.": SUPPORTED_LOCALES,
        "defaults.choice_": ("none", "on", "off"),
        # the admin portal (issue 30)
        "portal.provider_": ("okta", "entra", "google"),
        "portal.type_": ("saml", "oidc"),
    }
    for prefix, values in built.items():
        from_templates.discard(prefix)
        from_templates.update(prefix + value for value in values)
    missing = sorted(key for key in from_templates if key not in EN)
    assert not missing, missing


def test_env_example_documents_every_ui_knob() -> None:
    example = (Path(__file__).parents[2] / "config" / "tenantd.env.example").read_text()
    for name in (
        "TENANTD_UI",
        "TENANTD_UI_BRAND_NAME",
        "TENANTD_UI_LOGO_URL",
        "TENANTD_UI_ACCENT_COLOR",
        "TENANTD_UI_TEMPLATES_DIR",
    ):
        assert re.search(rf"^#? ?{name}=", example, re.M), name


async def test_change_password_from_the_profile_page(make: Maker, factory: Any) -> None:
    user = await factory.user(password=PASSWORD)
    client = await make()
    token = await form_token(client, "/login")
    response = await client.post(
        "/login", data={"email": user.email, "password": PASSWORD, "csrf": token}
    )
    assert response.status == 200 and str(response.url).endswith("/notifications")
    token = await form_token(client, "/account", "/account/password")
    new = "another long passphrase"
    wrong = await client.post(
        "/account/password",
        data={"currentPassword": "not it", "newPassword": new, "csrf": token},
    )
    assert wrong.status == 401
    assert 'class="alert error" role="alert"' in await wrong.text()
    done = await client.post(
        "/account/password",
        data={"currentPassword": PASSWORD, "newPassword": new, "csrf": token},
    )
    assert done.status == 200 and str(done.url).endswith("/account?done=password")
    assert EN["done.password"] in await done.text()
    api = await client.post("/api/v1/auth/login", json={"email": user.email, "password": new})
    assert api.status == 200


async def test_a_page_sign_in_keeps_the_browser_known(make: Maker, factory: Any, db: Any) -> None:
    """The sign-in page sets the device cookie, so signing in again from the same browser is
    not a "new sign-in" (no mail), while another browser is."""
    user = await factory.user(password=PASSWORD)

    async def page_sign_in(client: Any) -> Any:
        token = await form_token(client, "/login")
        response = await client.post(
            "/login",
            data={"email": user.email, "password": PASSWORD, "csrf": token},
            allow_redirects=False,
        )
        assert response.status == 303
        return response

    async def new_browser_events() -> list[bool]:
        rows = await db.fetch_all(
            "SELECT data FROM security_events WHERE user_id = %(u)s AND type = 'signed_in'"
            " ORDER BY id",
            {"u": user.id},
        )
        return [row["data"]["newBrowser"] for row in rows]

    first = await page_sign_in(await make())
    device = first.cookies["device_id"].value
    # The same browser later (its session cookies gone, its device cookie kept).
    laptop = await make()
    laptop.session.cookie_jar.update_cookies({"device_id": device})
    await page_sign_in(laptop)
    await page_sign_in(await make())
    assert await new_browser_events() == [False, False, True]


async def test_static_files_answer_like_every_other_route(make: Maker) -> None:
    """A missing or out-of-folder static file is the API's 404 envelope with its headers; a
    present one keeps its validators, so a browser's revalidation gets 304."""
    client = await make()

    async def envelope_404(path: str) -> dict[str, str]:
        response = await client.get(path)
        assert response.status == 404, path
        assert response.headers["Content-Type"] == "application/json", path
        assert (await response.json())["error"]["code"] == "NOT_FOUND", path
        return dict(response.headers)

    unknown = await envelope_404("/api/v1/no-such-route")
    # CORS headers depend on the path (`/static/../x` is `/x`, no CORS path): not compared.
    same = {h for h in unknown if not h.startswith("Access-Control-") and h != "Vary"}
    same -= {"X-Request-ID", "Date", "Content-Length"}
    for path in [
        "/static/missing.css",
        "/static/missing/deeper.js",
        "/static/../pyproject.toml",
        "/static/%2e%2e/pyproject.toml",
        "/static/..%2fpyproject.toml",
        "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static/..%5cpyproject.toml",
        "/static/..%2frender.py",  # tenantd/ui/render.py is there, one folder up
        "/static/..%2f..%2f..%2fpyproject.toml",
        "/static/%2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static/%2fetc%2fpasswd",
        "/static//etc/passwd",
        "/static/tenantd.js%00.css",
    ]:
        headers = await envelope_404(path)
        assert same <= set(headers), path
        assert headers["X-Request-ID"], path
    head = await client.head("/static/missing.css")
    assert head.status == 404
    # A file that is there: its type, validators and a 304 for a matching If-None-Match.
    script = await client.get("/static/tenantd.js")
    assert script.status == 200
    assert script.headers["Content-Type"] == "application/javascript"
    assert script.headers["Last-Modified"]
    etag = script.headers["ETag"]
    again = await client.get("/static/tenantd.js", headers={"If-None-Match": etag})
    assert again.status == 304
    assert again.headers["ETag"] == etag
    assert (await client.head("/static/tenantd.css")).status == 200


async def test_an_account_joined_or_created_on_the_pages_is_the_one_worked_in(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    owner = await factory.user(plan="team")
    members = f"/accounts/{owner.account_id}/members"
    owner_browser = await signed_in(make_client, db, settings, owner)
    # One invitee works in an account of their own (joining switches), one in none (the
    # acceptance itself activates the account).
    busy, idle = await factory.user(), await factory.user(account=False)
    for invitee in (busy, idle):
        invite = await post_form(owner_browser, members, members + "/invite", email=invitee.email)
        assert invite.status == 303, await invite.text()
        [mail] = await eventually(lambda: mails_to(mail_dir, invitee.email))  # noqa: B023
        token = link_token(mail, "/invitations/accept")
        browser = await signed_in(make_client, db, settings, invitee)
        here = f"/invitations/accept?token={token}"
        response = await post_form(browser, here, "/invitations/accept", token=token)
        assert response.status == 303, await response.text()
        assert response.headers["Location"] == f"{members}?done=joined"
        assert claims(browser)["aid"] == str(owner.account_id)
    # A new account is worked in at once too.
    browser = await signed_in(make_client, db, settings, busy)
    response = await post_form(browser, "/accounts", "/accounts", name="Side project")
    assert response.status == 303
    assert response.headers["Location"] == "/accounts?done=created"
    created = await db.fetch_val("SELECT id FROM accounts WHERE name = 'Side project'")
    assert claims(browser)["aid"] == str(created)


async def test_the_members_page_assigns_custom_roles_and_shows_what_a_role_may_do(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    owner = await factory.user(plan="team")
    member = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id, "member")
    members = f"/accounts/{owner.account_id}/members"
    owner_browser = await signed_in(make_client, db, settings, owner)
    created = await owner_browser.post(
        f"/api/v1/accounts/{owner.account_id}/roles",
        json={"key": "support", "name": "Support agent", "permissions": ["members:read"]},
    )
    assert created.status == 201
    page = await (await owner_browser.get(members)).text()
    assert '<option value="support">Support agent</option>' in page
    assert 'value="owner"' not in page  # the owner changes only by transfer
    action = f"{members}/{member.id}/role"
    response = await post_form(owner_browser, members, action, role="support")
    assert response.status == 303, await response.text()
    role = await db.fetch_val(
        "SELECT role FROM memberships WHERE user_id = %(u)s AND account_id = %(a)s",
        {"u": member.id, "a": owner.account_id},
    )
    assert role == "support"
    page = await (await owner_browser.get(members)).text()
    assert "Support agent</span>" in page  # the member's role pill names the custom role
    # The support agent sees the members, and none of the controls its role lacks.
    browser = await signed_in(make_client, db, settings, member, account_id=owner.account_id)
    page = await (await browser.get(members)).text()
    assert owner.email in page
    assert 'data-testid="role-select"' not in page
    assert 'action="' + members + '/invite"' not in page
    assert 'data-testid="rename"' not in page
