"""The social presets (github, google, microsoft, gitlab, apple) with a client id and secret,
each driven against a local fake speaking that provider's wire format (fake_social.py)."""

from __future__ import annotations

from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.app.settings import load_settings
from tenantd.auth.oauth import presets
from tenantd.auth.oauth.discovery import ProviderMetadata
from tenantd.auth.oauth.flow import code_challenge, decode_state
from tenantd.bundle import Services
from tenantd.db import Database
from tenantd.identity import stepup
from tenantd.identity.settings import OAuthProviderSettings
from tenantd.settings import SettingsError
from tests.auth.helpers import set_cookies
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.fake_social import (
    CONSUMERS_TENANT,
    FakeApple,
    FakeGitHub,
    FakeMicrosoft,
    apple_key,
    read_form,
)
from tests.auth.oauth.support import Browser, login_error
from tests.helpers import ORIGIN, SECRET

SECRETS = {name: f"{name}-client-secret-0f9e" for name in ("github", "google", "gitlab", "ms")}


def redirect(provider: str) -> str:
    return f"{ORIGIN}/api/v1/auth/oauth/{provider}/callback"


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
async def github(aiohttp_server: Any) -> FakeGitHub:
    fake = FakeGitHub("Iv1.8a61f9b3a7aba766", SECRETS["github"], redirect("github"))
    server = await aiohttp_server(fake.app())
    fake.base = str(server.make_url("")).rstrip("/")
    return fake


async def _oidc(aiohttp_server: Any, fake: FakeIdP) -> FakeIdP:
    server = await aiohttp_server(fake.app())
    fake.issuer = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
async def google(aiohttp_server: Any) -> FakeIdP:
    return await _oidc(
        aiohttp_server,
        FakeIdP(
            client_id="1234-abc.apps.googleusercontent.com",
            client_secret=SECRETS["google"],
            redirect_uris={redirect("google")},
            user=FakeUser(sub="110169484474386276334", email="g.user@example.org"),
            # Google's registration: client_secret_post and client_secret_basic both work.
            advertised_auth_methods=["client_secret_post", "client_secret_basic"],
        ),
    )


@pytest.fixture
async def gitlab(aiohttp_server: Any) -> FakeIdP:
    return await _oidc(
        aiohttp_server,
        FakeIdP(
            client_id="f0e1d2c3b4a5",
            client_secret=SECRETS["gitlab"],
            redirect_uris={redirect("gitlab")},
            user=FakeUser(sub="1234567", email="gl.user@example.org"),
        ),
    )


@pytest.fixture
async def microsoft(aiohttp_server: Any) -> FakeMicrosoft:
    fake = FakeMicrosoft(
        client_id="6731de76-14a6-49ae-97bc-6eba6914391e",
        client_secret=SECRETS["ms"],
        redirect_uris={redirect("microsoft")},
        user=FakeUser(
            sub="AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", email="ms.user@example.org"
        ),
    )
    await _oidc(aiohttp_server, fake)
    return fake


@pytest.fixture
async def apple(aiohttp_server: Any) -> tuple[FakeApple, str]:
    key, pem = apple_key()
    fake = FakeApple(
        client_id="com.example.web",
        client_secret="",  # Apple has no static secret: the JWT is checked instead
        redirect_uris={redirect("apple")},
        user=FakeUser(sub="001234.5f1e2d3c4b5a.0123", email="x7k2@privaterelay.appleid.com"),
        team_key=key,
    )
    await _oidc(aiohttp_server, fake)
    return fake, pem


@pytest.fixture
def env(
    env: dict[str, str],
    github: FakeGitHub,
    google: FakeIdP,
    gitlab: FakeIdP,
    microsoft: FakeMicrosoft,
    apple: tuple[FakeApple, str],
) -> dict[str, str]:
    fake_apple, pem = apple
    env.update(
        {
            "OAUTH_PROVIDERS": "github,google,microsoft,gitlab,apple",
            "OAUTH_GITHUB_CLIENT_ID": github.client_id,
            "OAUTH_GITHUB_CLIENT_SECRET": github.client_secret,
            "OAUTH_GITHUB_URL": github.base,
            "OAUTH_GITHUB_API_URL": f"{github.base}/api",
            "OAUTH_GOOGLE_CLIENT_ID": google.client_id,
            "OAUTH_GOOGLE_CLIENT_SECRET": google.client_secret,
            "OAUTH_GOOGLE_ISSUER": google.issuer,
            "OAUTH_GITLAB_CLIENT_ID": gitlab.client_id,
            "OAUTH_GITLAB_CLIENT_SECRET": gitlab.client_secret,
            "OAUTH_GITLAB_ISSUER": gitlab.issuer,
            "OAUTH_MICROSOFT_CLIENT_ID": microsoft.client_id,
            "OAUTH_MICROSOFT_CLIENT_SECRET": microsoft.client_secret,
            "OAUTH_MICROSOFT_ISSUER": f"{microsoft.issuer}/common/v2.0",
            "OAUTH_APPLE_CLIENT_ID": fake_apple.client_id,
            # A .p8 in an env file is one line: its newlines written as \n.
            "OAUTH_APPLE_CLIENT_SECRET": pem.replace("\n", "\\n"),
            "OAUTH_APPLE_TEAM_ID": fake_apple.team_id,
            "OAUTH_APPLE_KEY_ID": fake_apple.key_id,
            "OAUTH_APPLE_ISSUER": fake_apple.issuer,
        }
    )
    return env


async def identities(db: Database) -> list[tuple[str, str, str]]:
    rows = await db.fetch_all(
        "SELECT i.provider, i.subject, u.email FROM user_identities i"
        " JOIN users u ON u.id = i.user_id ORDER BY i.provider"
    )
    return [(r["provider"], r["subject"], r["email"]) for r in rows]


async def users(db: Database) -> int:
    return int(await db.fetch_val("SELECT count(*) FROM users"))


# --- GitHub -------------------------------------------------------------------------------


async def test_github_signs_in_with_the_primary_verified_address(
    browser: Browser, github: FakeGitHub, db: Database
) -> None:
    authorize_url = await browser.start("github")
    assert authorize_url.startswith(f"{github.base}/login/oauth/authorize?")
    query = query_of(authorize_url)
    assert query["client_id"] == github.client_id
    assert query["redirect_uri"] == redirect("github")
    assert query["scope"] == "read:user user:email"
    assert query["response_type"] == "code"
    assert "nonce" not in query  # OAuth 2.0, not OpenID Connect
    kept = decode_state(SECRET, browser.cookie("oauth_state"), provider="github")
    assert query["state"] == kept.state
    assert query["code_challenge"] == code_challenge(kept.code_verifier)

    response = await browser.callback(await browser.authorize(authorize_url))
    assert response.status == 302 and response.headers["Location"] == "/"
    me = await browser.me()
    assert me["user"]["email"] == "mona@example.org"
    assert (me["user"]["firstName"], me["user"]["lastName"]) == ("Mona", "Lisa")
    assert me["user"]["emailVerifiedAt"] is not None
    assert await identities(db) == [("github", "583231", "mona@example.org")]

    form = github.token_forms[-1]
    assert form["client_secret"] == github.client_secret
    assert form["grant_type"] == "authorization_code"
    assert form["redirect_uri"] == redirect("github")
    for headers in github.api_seen:
        assert headers["Authorization"].startswith("Bearer gho_")
        assert headers["Accept"] == "application/vnd.github+json"
        assert headers["User-Agent"]


async def test_github_picks_the_primary_address_not_the_public_one(
    browser: Browser, github: FakeGitHub, db: Database
) -> None:
    github.user.emails = [
        {"email": "public@example.org", "primary": False, "verified": True, "visibility": "public"},
        {"email": "Primary@Example.org", "primary": True, "verified": True, "visibility": None},
    ]
    response = await browser.sign_in(provider="github")
    assert response.headers["Location"] == "/"
    assert await identities(db) == [("github", "583231", "primary@example.org")]


async def test_github_unverified_primary_address_is_refused_and_writes_nothing(
    browser: Browser, github: FakeGitHub, db: Database
) -> None:
    github.user.emails = [
        {"email": "mona@example.org", "primary": True, "verified": False, "visibility": None},
        {"email": "other@example.org", "primary": False, "verified": True, "visibility": None},
    ]
    response = await browser.sign_in(provider="github")
    assert login_error(response)["error"] == "email_not_verified"
    assert await users(db) == 0


async def test_github_refusal_answered_with_200_is_a_failed_sign_in(
    browser: Browser, github: FakeGitHub, db: Database
) -> None:
    github.client_secret = "rotated-at-github"  # our secret is now wrong
    response = await browser.sign_in(provider="github")
    assert login_error(response)["error"] == "oauth_failed"
    assert await users(db) == 0


async def test_github_cannot_be_used_for_step_up(browser: Browser, github: FakeGitHub) -> None:
    assert (await browser.sign_in(provider="github")).status == 302
    response = await browser.client.get("/api/v1/auth/oauth/github/reauth", allow_redirects=False)
    assert response.status == 404  # GitHub cannot prove a fresh sign-in (no prompt=login)


async def test_github_is_not_offered_as_a_step_up_method(
    browser: Browser, github: FakeGitHub, services: Services, db: Database
) -> None:
    assert (await browser.sign_in(provider="github")).status == 302
    user_id = await db.fetch_val("SELECT user_id FROM user_identities")
    async with services.db.connection() as conn:
        assert await stepup.reauth_providers(conn, services.settings, user_id) == []
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject) VALUES (%(u)s, 'google', 'g1')",
        {"u": user_id},
    )
    async with services.db.connection() as conn:
        assert await stepup.reauth_providers(conn, services.settings, user_id) == ["google"]


# --- Google and GitLab --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["google", "gitlab"])
async def test_openid_presets_sign_in_by_discovery(
    browser: Browser, request: pytest.FixtureRequest, db: Database, name: str
) -> None:
    fake: FakeIdP = request.getfixturevalue(name)
    authorize_url = await browser.start(name)
    assert authorize_url.startswith(f"{fake.issuer}/authorize?")
    query = query_of(authorize_url)
    assert query["scope"] == "openid email profile"
    assert query["nonce"] and query["code_challenge_method"] == "S256"
    response = await browser.callback(await browser.authorize(authorize_url))
    assert response.headers["Location"] == "/"
    assert await identities(db) == [(name, fake.user.sub, fake.user.email)]
    assert fake.hits["discovery"] == 1 and fake.hits["token"] == 1


# --- Microsoft ----------------------------------------------------------------------------


async def test_microsoft_personal_account_signs_in_with_its_tenant_issuer(
    browser: Browser, microsoft: FakeMicrosoft, db: Database
) -> None:
    microsoft.tid = CONSUMERS_TENANT  # a personal Microsoft account: Microsoft owns the mailbox
    authorize_url = await browser.start("microsoft")
    assert authorize_url.startswith(f"{microsoft.issuer}/common/oauth2/v2.0/authorize?")
    response = await browser.callback(await browser.authorize(authorize_url))
    assert response.headers["Location"] == "/", response.headers["Location"]
    assert await identities(db) == [("microsoft", microsoft.user.sub, "ms.user@example.org")]


async def test_microsoft_work_account_email_counts_only_with_xms_edov(
    browser: Browser, new_browser: Any, microsoft: FakeMicrosoft, db: Database
) -> None:
    # A tenant admin can set any address on a work account: without the domain-owner claim
    # the address proves nothing (the nOAuth takeover).
    response = await browser.sign_in(provider="microsoft")
    assert login_error(response)["error"] == "email_not_verified"
    assert await users(db) == 0
    microsoft.edov = True
    again = await new_browser()
    response = await again.sign_in(provider="microsoft")
    assert response.headers["Location"] == "/"
    assert await users(db) == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {"iss": "{base}/00000000-1111-2222-3333-444444444444/v2.0"},  # another tenant's issuer
        {"tid": "not-a-tenant"},
        {"tid": None},
    ],
)
async def test_microsoft_id_token_issuer_must_be_its_own_tenants(
    browser: Browser, microsoft: FakeMicrosoft, db: Database, overrides: dict[str, Any]
) -> None:
    microsoft.edov = True
    microsoft.claim_overrides = {
        k: v.format(base=microsoft.issuer) if isinstance(v, str) else v
        for k, v in overrides.items()
    }
    response = await browser.sign_in(provider="microsoft")
    assert login_error(response)["error"] == "oauth_failed"
    assert await users(db) == 0


# --- Apple --------------------------------------------------------------------------------


def plant_state(browser: Browser, provider: str, value: str) -> None:
    """The state cookie as the start route set it: a Secure cookie would not travel over the
    test's plain http, so it is planted by hand (scoped to the callback)."""
    cookie: SimpleCookie = SimpleCookie()
    cookie["oauth_state"] = value
    cookie["oauth_state"]["path"] = f"/api/v1/auth/oauth/{provider}/callback"
    browser.client.session.cookie_jar.update_cookies(
        cookie, response_url=browser.client.make_url("/")
    )


async def apple_sign_in(browser: Browser, fake: FakeApple) -> Any:
    start = await browser.client.get("/api/v1/auth/oauth/apple/start", allow_redirects=False)
    assert start.status == 302
    state_cookie = set_cookies(start)["oauth_state"]
    # The form POST from appleid.apple.com is cross-site: only SameSite=None comes back.
    assert state_cookie["samesite"] == "None" and "secure" in state_cookie
    authorize_url = start.headers["Location"]
    async with browser.idp_session.get(authorize_url) as page:
        assert page.status == 200
        action, method, fields = read_form(await page.text())
    assert (action, method) == (redirect("apple"), "POST")
    plant_state(browser, "apple", state_cookie["value"])
    return await browser.client.post(
        urlsplit(action).path,
        data=fields,
        headers={"Origin": "https://appleid.apple.com"},
        allow_redirects=False,
    ), query_of(authorize_url)


async def test_apple_form_post_with_a_signed_client_secret(
    browser: Browser, new_browser: Any, apple: tuple[FakeApple, str], db: Database
) -> None:
    fake, _pem = apple
    response, query = await apple_sign_in(browser, fake)
    assert query["response_mode"] == "form_post"
    assert query["scope"] == "openid email name"
    assert response.status == 302 and response.headers["Location"] == "/", await response.text()
    me = await browser.me()
    # The name came in the first form's `user` field only.
    assert (me["user"]["firstName"], me["user"]["lastName"]) == ("Alice", "Liddell")
    assert me["user"]["email"] == "x7k2@privaterelay.appleid.com"
    assert await identities(db) == [("apple", fake.user.sub, fake.user.email)]
    secret = fake.secrets_seen[-1]
    assert secret["header"] == {"alg": "ES256", "kid": fake.key_id, "typ": "JWT"}
    assert secret["claims"]["iss"] == fake.team_id
    assert secret["claims"]["sub"] == fake.client_id
    assert 0 < secret["claims"]["exp"] - secret["claims"]["iat"] <= 15777000

    # Later sign-ins carry no name: the user is the same, the name kept.
    again = await new_browser()
    response, _ = await apple_sign_in(again, fake)
    assert response.headers["Location"] == "/"
    assert (await again.me())["user"]["firstName"] == "Alice"
    assert await users(db) == 1


async def test_apple_callback_by_get_and_others_by_post_are_refused(
    browser: Browser, apple: tuple[FakeApple, str], google: FakeIdP, db: Database
) -> None:
    start = await browser.client.get("/api/v1/auth/oauth/apple/start", allow_redirects=False)
    plant_state(browser, "apple", set_cookies(start)["oauth_state"]["value"])
    async with browser.idp_session.get(start.headers["Location"]) as page:
        _action, _method, fields = read_form(await page.text())
    by_get = await browser.client.get(
        "/api/v1/auth/oauth/apple/callback", params=fields, allow_redirects=False
    )
    assert login_error(by_get)["error"] == "oauth_state_invalid"

    authorize_url = await browser.start("google")
    callback = await browser.authorize(authorize_url)
    by_post = await browser.client.post(
        urlsplit(callback).path,
        data=query_of(callback),
        allow_redirects=False,
    )
    assert login_error(by_post)["error"] == "oauth_state_invalid"
    assert await users(db) == 0


async def test_apple_refuses_a_client_secret_signed_by_another_key(
    browser: Browser, apple: tuple[FakeApple, str], db: Database
) -> None:
    fake, _pem = apple
    fake.team_key, _ = apple_key()  # Apple holds another key than the one we sign with
    response, _ = await apple_sign_in(browser, fake)
    assert login_error(response)["error"] == "oauth_failed"
    assert await users(db) == 0


# --- settings -----------------------------------------------------------------------------


def test_presets_need_only_a_client_id_and_secret_and_apple_its_key_ids(
    env: dict[str, str],
) -> None:
    minimal = {
        k: v
        for k, v in env.items()
        if not k.startswith("OAUTH_") or k.endswith(("_CLIENT_ID", "_CLIENT_SECRET"))
    }
    minimal["OAUTH_PROVIDERS"] = "github,google,microsoft,gitlab"
    settings = load_settings(environ=minimal)
    assert [p.preset for p in settings.sign_in.oauth_providers] == [
        "github",
        "google",
        "microsoft",
        "gitlab",
    ]
    minimal["OAUTH_PROVIDERS"] = "apple"
    with pytest.raises(SettingsError, match="OAUTH_APPLE_TEAM_ID, OAUTH_APPLE_KEY_ID"):
        load_settings(environ=minimal)
    minimal.update(OAUTH_APPLE_TEAM_ID="TEAM123456", OAUTH_APPLE_KEY_ID="KEY1234567")
    assert (
        load_settings(environ=minimal).sign_in.oauth_providers[0].option("TEAM_ID") == "TEAM123456"
    )
    p384 = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    for wrong in ("a-shared-secret", p384.decode()):
        minimal["OAUTH_APPLE_CLIENT_SECRET"] = wrong
        with pytest.raises(SettingsError, match=r"must be the \.p8 private key"):
            load_settings(environ=minimal)
    minimal["OAUTH_PROVIDERS"] = "okta"  # not a preset: the issuer is needed as before
    with pytest.raises(SettingsError, match="OAUTH_OKTA_ISSUER"):
        load_settings(environ=minimal)


def test_preset_default_endpoints() -> None:
    def provider(name: str, **options: str) -> OAuthProviderSettings:
        return OAuthProviderSettings(
            name=name,
            issuer="",
            client_id="c",
            client_secret="s",
            scopes=(),
            preset=name,
            options=tuple(options.items()),
        )

    assert presets.discovery_issuer(provider("google")) == "https://accounts.google.com"
    assert presets.discovery_issuer(provider("gitlab")) == "https://gitlab.com"
    assert presets.discovery_issuer(provider("apple")) == "https://appleid.apple.com"
    assert (
        presets.discovery_issuer(provider("microsoft"))
        == "https://login.microsoftonline.com/common/v2.0"
    )
    assert (
        presets.discovery_issuer(provider("microsoft", TENANT="organizations"))
        == "https://login.microsoftonline.com/organizations/v2.0"
    )
    github = presets.github_metadata(provider("github"))
    assert github.authorization_endpoint == "https://github.com/login/oauth/authorize"
    assert github.token_endpoint == "https://github.com/login/oauth/access_token"
    assert github.userinfo_endpoint == "https://api.github.com/user"
    assert presets.accepts_issuer(
        provider("microsoft"),
        "https://login.microsoftonline.com/{tenantid}/v2.0",
        "https://login.microsoftonline.com/common/v2.0",
    )
    assert not presets.accepts_issuer(
        provider("microsoft"),
        "https://evil.example/{tenantid}/v2.0",
        "https://login.microsoftonline.com/common/v2.0",
    )
    google = ProviderMetadata(
        issuer="https://accounts.google.com",
        authorization_endpoint="https://accounts.google.com/o/oauth2/v2/auth",
        token_endpoint="https://oauth2.googleapis.com/token",
        jwks_uri="https://www.googleapis.com/oauth2/v3/certs",
        token_auth_method="client_secret_basic",
    )
    # Google's ID tokens name their issuer with or without the scheme.
    assert presets.id_token_issuers(provider("google"), google, "x.y.z") == [
        "https://accounts.google.com",
        "accounts.google.com",
    ]
    assert presets.id_token_issuers(provider("gitlab"), google, "x.y.z") == [google.issuer]


async def test_hosted_login_page_offers_each_preset_by_its_name(browser: Browser) -> None:
    page = await (await browser.client.get("/login")).text()
    for name, label in [
        ("github", "GitHub"),
        ("google", "Google"),
        ("microsoft", "Microsoft"),
        ("gitlab", "GitLab"),
        ("apple", "Apple"),
    ]:
        assert f"/api/v1/auth/oauth/{name}/start" in page
        assert label in page
    assert "Github" not in page and "Gitlab" not in page
