"""The browser-style flow: start -> provider -> callback -> cookies -> /me, and linking rules."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.auth.oauth.flow import code_challenge, decode_state
from tenantd.db import Database
from tests.auth.helpers import mail_sent
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import (
    CALLBACK_PATH,
    CLIENT_ID,
    CLIENT_SECRET,
    PROVIDER,
    REDIRECT_URI,
    Browser,
    login_error,
)
from tests.factories import Factory, mail_text, read_mails
from tests.helpers import ORIGIN, SECRET


async def count(db: Database, table: str) -> int:
    return int(await db.fetch_val(f"SELECT count(*) FROM {table}"))


async def test_full_flow_creates_verified_user_account_and_session(
    browser: Browser, idp: FakeIdP, db: Database
) -> None:
    start = await browser.client.get(f"/api/v1/auth/oauth/{PROVIDER}/start", allow_redirects=False)
    assert start.status == 302
    authorize_url = start.headers["Location"]
    parts = urlsplit(authorize_url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{idp.issuer}/authorize"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query["response_type"] == "code"
    assert query["client_id"] == CLIENT_ID
    assert query["redirect_uri"] == REDIRECT_URI
    assert query["scope"].split() == ["openid", "email", "profile"]
    assert query["code_challenge_method"] == "S256"
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32

    # The state cookie: HttpOnly, Lax, 10 minutes, only sent to the callback.
    set_cookie = start.headers["Set-Cookie"]
    assert set_cookie.startswith("oauth_state=")
    assert "HttpOnly" in set_cookie
    assert "SameSite=Lax" in set_cookie
    assert f"Path={CALLBACK_PATH}" in set_cookie
    assert "Max-Age=600" in set_cookie
    assert "Secure" not in set_cookie  # COOKIE_SECURE=false in tests
    kept = decode_state(SECRET, browser.cookie("oauth_state"), provider=PROVIDER)
    assert kept.state == query["state"] and kept.nonce == query["nonce"]
    assert code_challenge(kept.code_verifier) == query["code_challenge"]

    callback = await browser.callback(await browser.authorize(authorize_url))
    assert callback.status == 302
    assert callback.headers["Location"] == "/"
    assert browser.cookie("auth_token") and browser.cookie("refresh_token")
    assert browser.cookie("oauth_state") is None  # cleared by the callback
    assert idp.client_auth_seen == ["basic"]

    me = await browser.me()
    assert me["user"]["email"] == "alice@example.org"
    assert me["user"]["firstName"] == "Alice" and me["user"]["lastName"] == "Liddell"
    assert me["user"]["emailVerifiedAt"] is not None
    assert [p["provider"] for p in me["authProviders"]] == [PROVIDER]
    assert me["hasPasswordLogin"] is False
    assert me["role"] == "owner"
    assert me["account"]["name"] == "Alice Liddell"

    assert await count(db, "users") == 1
    assert await count(db, "user_passwords") == 0
    identity = await db.fetch_one("SELECT * FROM user_identities")
    assert identity is not None
    assert (identity["provider"], identity["subject"]) == (PROVIDER, "fake-subject-1")
    assert await count(db, "accounts") == 1
    assert await count(db, "memberships WHERE role = 'owner'") == 1
    assert await count(db, "sessions") == 1


async def test_return_to_is_honoured_when_relative(browser: Browser) -> None:
    response = await browser.sign_in(return_to="/settings/security?tab=2")
    assert response.status == 302
    assert response.headers["Location"] == "/settings/security?tab=2"


@pytest.mark.parametrize(
    "hostile",
    [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "javascript:alert(1)",
        "evil.example",
    ],
)
async def test_unsafe_return_to_falls_back_to_root(browser: Browser, hostile: str) -> None:
    response = await browser.sign_in(return_to=hostile)
    assert response.status == 302
    assert response.headers["Location"] == "/"


async def test_returning_user_gets_the_same_user_and_identity(
    browser: Browser, new_browser: Any, idp: FakeIdP, db: Database
) -> None:
    assert (await browser.sign_in()).status == 302
    first = await browser.me()
    idp.user.email = "alice.new@example.org"  # changed at the provider
    again = await new_browser()
    response = await again.sign_in()
    assert response.headers["Location"] == "/"
    second = await again.me()
    assert second["user"]["id"] == first["user"]["id"]
    assert second["account"]["id"] == first["account"]["id"]
    assert await count(db, "users") == 1
    assert await count(db, "accounts") == 1
    assert await db.fetch_val("SELECT email FROM user_identities") == "alice.new@example.org"
    # The user's own address is theirs to change; the provider does not rewrite it.
    assert second["user"]["email"] == "alice@example.org"


async def test_existing_verified_user_gets_the_provider_linked(
    browser: Browser, idp: FakeIdP, factory: Factory, db: Database
) -> None:
    user = await factory.user(email="Alice@Example.org")
    response = await browser.sign_in()
    assert response.status == 302 and response.headers["Location"] == "/"
    me = await browser.me()
    assert me["user"]["id"] == str(user.id)
    assert me["account"]["id"] == str(user.account_id)
    assert [p["provider"] for p in me["authProviders"]] == ["password", PROVIDER]
    assert me["hasPasswordLogin"] is True
    assert await count(db, "users") == 1
    assert await count(db, "accounts") == 1


async def test_unverified_sign_up_is_claimed_and_its_unproven_password_dropped(
    browser: Browser, client: TestClient[Any, Any], factory: Factory, db: Database
) -> None:
    # Someone registered the address with a password and never confirmed it.
    user = await factory.user(email="alice@example.org", verified=False)
    await db.execute(
        "INSERT INTO user_tokens (token_hash, user_id, purpose, expires_at)"
        " VALUES ('\\x01', %(u)s, 'verify_email', now() + interval '1 day')",
        {"u": user.id},
    )
    response = await browser.sign_in()
    assert response.headers["Location"] == "/"
    me = await browser.me()
    assert me["user"]["id"] == str(user.id)
    assert me["user"]["emailVerifiedAt"] is not None
    assert me["hasPasswordLogin"] is False
    assert await count(db, "user_passwords") == 0
    assert await count(db, "user_tokens") == 0
    assert await count(db, "memberships WHERE role = 'owner'") == 1
    # The password the earlier sign-up chose no longer opens the account.
    login = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 401


async def test_new_user_with_another_identity_at_the_provider_is_refused(
    browser: Browser, idp: FakeIdP, factory: Factory, db: Database
) -> None:
    user = await factory.user(email="alice@example.org")
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject) VALUES (%(u)s, %(p)s, 'other')",
        {"u": user.id, "p": PROVIDER},
    )
    response = await browser.sign_in()
    assert login_error(response) == {"error": "identity_conflict"}
    assert browser.cookie("auth_token") is None
    assert await count(db, "user_identities") == 1
    assert await count(db, "sessions") == 0


async def test_concurrent_callbacks_for_one_new_identity_make_one_user(
    new_browser: Any, idp: FakeIdP, db: Database
) -> None:
    browsers: list[Browser] = [await new_browser() for _ in range(8)]
    paths = [await b.authorize(await b.start()) for b in browsers]
    responses = await asyncio.gather(*(b.callback(p) for b, p in zip(browsers, paths, strict=True)))
    assert [r.status for r in responses] == [302] * 8
    assert all(r.headers["Location"] == "/" for r in responses)
    assert await count(db, "users") == 1
    assert await count(db, "user_identities") == 1
    assert await count(db, "accounts") == 1
    assert await count(db, "memberships") == 1
    assert await count(db, "sessions") == 8


async def test_concurrent_callbacks_of_two_subjects_for_one_address_make_one_user(
    new_browser: Any, idp: FakeIdP, db: Database
) -> None:
    browsers: list[Browser] = [await new_browser() for _ in range(6)]
    paths = []
    for number, b in enumerate(browsers):
        idp.user = FakeUser(sub=f"subject-{number % 2}")
        paths.append(await b.authorize(await b.start()))
    responses = await asyncio.gather(*(b.callback(p) for b, p in zip(browsers, paths, strict=True)))
    outcomes = sorted(r.headers["Location"] for r in responses)
    # One subject links first; the other subject is then a second identity at the same
    # provider for that user, which is refused (one identity per provider and user).
    assert await count(db, "users") == 1
    assert await count(db, "user_identities") == 1
    assert await count(db, "accounts") == 1
    assert outcomes.count("/") == 3
    assert outcomes.count("/login?error=identity_conflict") == 3


@pytest.mark.oauth_env(ACCOUNT_DOMAIN_CLAIMING="true")
async def test_claimed_domain_commits_join_request_and_refuses_the_session(
    browser: Browser, idp: FakeIdP, factory: Factory, db: Database, mail_dir: Any
) -> None:
    owner = await factory.user(email="owner@acme.test")
    await db.execute(
        "UPDATE accounts SET claimed_domain = 'acme.test' WHERE id = %(a)s",
        {"a": owner.account_id},
    )
    idp.user = FakeUser(sub="bob-subject", email="bob@acme.test", given_name="Bob")
    response = await browser.sign_in()
    assert login_error(response) == {
        "error": "domain_claimed",
        "domain": "acme.test",
        "accountId": str(owner.account_id),
    }
    assert browser.cookie("auth_token") is None and browser.cookie("refresh_token") is None
    bob = await db.fetch_one("SELECT * FROM users WHERE email = 'bob@acme.test'")
    assert bob is not None and bob["email_verified_at"] is not None
    assert await count(db, "user_identities") == 1
    request = await db.fetch_one("SELECT * FROM join_requests")
    assert request is not None
    assert (request["user_id"], request["account_id"], request["status"]) == (
        bob["id"],
        owner.account_id,
        "pending",
    )
    assert await count(db, "accounts") == 1
    assert await count(db, "sessions") == 0
    await mail_sent(browser.client)  # the join-request mails leave from a job after the commit
    mails = {m["To"]: m for m in read_mails(mail_dir)}
    assert sorted(mails) == ["bob@acme.test", "owner@acme.test"]  # the requester is told too
    assert "bob@acme.test" in mail_text(mails["owner@acme.test"])


@pytest.mark.oauth_env(
    OAUTH_PROVIDERS="fake,other",
    OAUTH_OTHER_ISSUER="{issuer}",
    OAUTH_OTHER_CLIENT_ID=CLIENT_ID,
    OAUTH_OTHER_CLIENT_SECRET=CLIENT_SECRET,
    OAUTH_OTHER_SCOPES="openid email",
)
async def test_two_providers_at_once_link_to_one_user(
    new_browser: Any, idp: FakeIdP, db: Database
) -> None:
    idp.redirect_uris.add(f"{ORIGIN}/api/v1/auth/oauth/other/callback")
    first: Browser = await new_browser()
    second: Browser = await new_browser()
    fake_url = await first.start(PROVIDER)
    other_url = await second.start("other")
    assert parse_qs(urlsplit(other_url).query)["scope"] == ["openid email"]
    paths = [await first.authorize(fake_url), await second.authorize(other_url)]
    responses = await asyncio.gather(first.callback(paths[0]), second.callback(paths[1]))
    assert [r.headers["Location"] for r in responses] == ["/", "/"]
    assert await count(db, "users") == 1
    assert await count(db, "accounts") == 1
    me = await second.me()
    assert sorted(p["provider"] for p in me["authProviders"]) == ["fake", "other"]
    listed = await (await first.client.get("/api/v1/auth/oauth/providers")).json()
    assert [p["name"] for p in listed["data"]] == ["fake", "other"]


async def test_routes_are_in_the_openapi_document(client: TestClient[Any, Any]) -> None:
    document = await (await client.get("/api/v1/openapi.json")).json()
    paths = document["paths"]
    assert "get" in paths["/api/v1/auth/oauth/{provider}/start"]
    assert "get" in paths["/api/v1/auth/oauth/{provider}/callback"]
    assert "delete" in paths["/api/v1/auth/oauth/{provider}"]
    assert "get" in paths["/api/v1/auth/oauth/providers"]


async def test_providers_are_listed_for_the_login_page(client: TestClient[Any, Any]) -> None:
    response = await client.get("/api/v1/auth/oauth/providers")
    assert response.status == 200
    body = await response.json()
    assert body["data"] == [{"name": PROVIDER, "startUrl": f"/api/v1/auth/oauth/{PROVIDER}/start"}]


async def test_unknown_provider_is_not_found(client: TestClient[Any, Any]) -> None:
    for path in ("/api/v1/auth/oauth/nope/start", "/api/v1/auth/oauth/nope/callback?code=x"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "NOT_FOUND"


async def test_secure_cookie_setting_marks_the_state_cookie_secure(
    env: dict[str, str], migrated: str, aiohttp_client: Any, db: Database
) -> None:
    settings = load_settings(environ={**env, "COOKIE_SECURE": "true"})
    client = await aiohttp_client(create_app(settings, migrated))
    response = await client.get(f"/api/v1/auth/oauth/{PROVIDER}/start", allow_redirects=False)
    assert response.status == 302
    assert "Secure" in response.headers["Set-Cookie"]
