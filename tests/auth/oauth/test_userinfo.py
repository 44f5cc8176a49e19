"""OIDC Core 5.4: a provider that keeps email and profile claims out of the ID token and hands
them out from UserInfo (panva's oidc-provider does so by default); and the token endpoint
auth method from discovery or OAUTH_<NAME>_TOKEN_AUTH."""

from __future__ import annotations

import logging
from typing import Any

import jwt
import pytest

from tenantd.addresses import normalize_email
from tenantd.app.settings import load_settings
from tenantd.auth.oauth.client import token_answer
from tenantd.auth.oauth.errors import TokenRefused
from tenantd.db import Database
from tenantd.settings import SettingsError
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import CLIENT_SECRET, PROVIDER, Browser, login_error
from tests.factories import Factory

TABLES = ("users", "user_identities", "accounts", "memberships", "sessions")


@pytest.fixture
def idp(idp: FakeIdP) -> FakeIdP:
    idp.claims_in_id_token = False  # every test here: the claims live in UserInfo only
    return idp


async def rows(db: Database) -> dict[str, int]:
    return {t: int(await db.fetch_val(f"SELECT count(*) FROM {t}")) for t in TABLES}


def nothing_secret_logged(caplog: pytest.LogCaptureFixture, idp: FakeIdP) -> None:
    logged = "\n".join(
        f"{r.getMessage()} {r.__dict__!r}" for r in caplog.records if r.name != "aiohttp.access"
    )
    for secret in [*idp.access_tokens, *idp.codes, CLIENT_SECRET, *idp.issued_id_tokens]:
        assert secret not in logged


# --- claims from UserInfo ---------------------------------------------------------------------


async def test_sign_in_succeeds_with_claims_only_in_userinfo(
    browser: Browser, idp: FakeIdP, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = await browser.sign_in()
    assert response.headers["Location"] == "/", response.headers["Location"]
    [id_token] = idp.issued_id_tokens
    claims = jwt.decode(id_token, options={"verify_signature": False})
    assert not {"email", "email_verified", "given_name", "family_name"} & set(claims)
    assert idp.hits["userinfo"] == 1
    assert idp.userinfo_auth_seen == ["bearer"]
    me = await browser.me()
    assert me["user"]["email"] == "alice@example.org"
    assert (me["user"]["firstName"], me["user"]["lastName"]) == ("Alice", "Liddell")
    assert me["user"]["emailVerifiedAt"] is not None
    assert (await rows(db))["sessions"] == 1
    nothing_secret_logged(caplog, idp)


async def test_userinfo_is_not_asked_when_the_id_token_has_the_claims(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.claims_in_id_token = True
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.hits["userinfo"] == 0


async def test_userinfo_of_another_subject_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    idp.userinfo_overrides = {"sub": "someone-else", "email": "mallory@example.org"}
    response = await browser.sign_in()
    assert login_error(response) == {"error": "oauth_failed"}
    assert browser.cookie("auth_token") is None
    assert set((await rows(db)).values()) == {0}
    assert any("userinfo sub does not match" in repr(r.__dict__) for r in caplog.records)
    nothing_secret_logged(caplog, idp)


async def test_userinfo_without_sub_is_refused(
    browser: Browser, idp: FakeIdP, db: Database
) -> None:
    idp.userinfo_overrides = {"sub": None}
    assert login_error(await browser.sign_in()) == {"error": "oauth_failed"}
    assert set((await rows(db)).values()) == {0}


@pytest.mark.parametrize("verified", [False, "false", None])
async def test_userinfo_email_not_vouched_for_writes_nothing(
    browser: Browser, idp: FakeIdP, db: Database, verified: Any
) -> None:
    idp.user = FakeUser(email_verified=verified)
    assert login_error(await browser.sign_in()) == {"error": "email_not_verified"}
    assert set((await rows(db)).values()) == {0}


async def test_userinfo_email_verified_follows_the_id_token_rule(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.user = FakeUser(email_verified="true")  # AWS Cognito's string, accepted in ID tokens
    assert (await browser.sign_in()).headers["Location"] == "/"


async def test_userinfo_without_email_is_email_missing(
    browser: Browser, idp: FakeIdP, db: Database
) -> None:
    idp.user = FakeUser(email=None)
    assert login_error(await browser.sign_in()) == {"error": "email_missing"}
    assert set((await rows(db)).values()) == {0}


async def test_userinfo_email_is_normalised_like_an_id_token_email(
    browser: Browser, idp: FakeIdP, db: Database, factory: Factory
) -> None:
    raw = " Alice@EXAMPLE.Org"
    existing = await factory.user(email=normalize_email(raw.strip()))
    idp.user = FakeUser(email=raw)
    assert (await browser.sign_in()).headers["Location"] == "/"
    # The provider's address found the user with the normalised one: linked, not a second user.
    assert (await rows(db))["users"] == 1
    linked = await db.fetch_val("SELECT user_id FROM user_identities")
    assert linked == existing.id


async def test_email_pair_from_userinfo_when_the_id_token_lacks_email_verified(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.claims_in_id_token = True
    idp.claim_overrides = {"email_verified": None}  # email alone in the ID token
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.hits["userinfo"] == 1
    assert (await browser.me())["user"]["email"] == "alice@example.org"


async def test_failing_userinfo_is_reported_unavailable(
    browser: Browser, idp: FakeIdP, db: Database
) -> None:
    idp.userinfo_status = 503
    assert login_error(await browser.sign_in()) == {"error": "oauth_unavailable"}
    assert set((await rows(db)).values()) == {0}


async def test_provider_without_userinfo_endpoint_is_email_missing(
    browser: Browser, idp: FakeIdP, db: Database
) -> None:
    idp.discovery_overrides = {"userinfo_endpoint": None}
    assert login_error(await browser.sign_in()) == {"error": "email_missing"}
    assert idp.hits["userinfo"] == 0


async def test_plain_http_userinfo_endpoint_makes_the_provider_unavailable(
    browser: Browser, idp: FakeIdP
) -> None:
    # An access token is never sent in the clear: the metadata is refused as a whole.
    idp.discovery_overrides = {"userinfo_endpoint": "http://userinfo.example.com/me"}
    response = await browser.client.get(
        f"/api/v1/auth/oauth/{PROVIDER}/start", allow_redirects=False
    )
    assert login_error(response) == {"error": "oauth_unavailable"}
    assert idp.hits["authorize"] == 0 and idp.hits["userinfo"] == 0


# --- token endpoint authentication ------------------------------------------------------------


BOTH = ["client_secret_basic", "client_secret_post"]


async def test_discovery_offering_both_methods_gets_basic(browser: Browser, idp: FakeIdP) -> None:
    idp.advertised_auth_methods = BOTH
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.client_auth_seen == ["basic"]


async def test_discovery_offering_only_post_gets_post(browser: Browser, idp: FakeIdP) -> None:
    idp.auth_method = "client_secret_post"
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.client_auth_seen == ["post"]


@pytest.mark.oauth_env(OAUTH_FAKE_TOKEN_AUTH="client_secret_post")
async def test_override_picks_post_when_the_client_is_registered_for_it(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.advertised_auth_methods = BOTH
    idp.auth_method = "client_secret_post"  # the client's registration at the provider
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.client_auth_seen == ["post"]


async def test_without_override_a_post_registered_client_is_refused(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.advertised_auth_methods = BOTH
    idp.auth_method = "client_secret_post"
    assert login_error(await browser.sign_in()) == {"error": "oauth_failed"}
    assert idp.client_auth_seen == ["basic"]
    assert idp.token_refusals == ["client auth method"]


@pytest.mark.oauth_env(OAUTH_FAKE_TOKEN_AUTH="Client_Secret_Basic")
async def test_override_picks_basic_even_when_discovery_lists_only_post(
    browser: Browser, idp: FakeIdP
) -> None:
    idp.advertised_auth_methods = ["client_secret_post"]
    idp.auth_method = "client_secret_basic"
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.client_auth_seen == ["basic"]


def test_token_auth_setting_is_read_per_provider(env: dict[str, str]) -> None:
    env.update(
        {"OAUTH_PROVIDERS": "fake,azure-ad", "OAUTH_AZURE_AD_TOKEN_AUTH": "client_secret_post"}
    )
    for name in ("ISSUER", "CLIENT_ID", "CLIENT_SECRET"):
        env[f"OAUTH_AZURE_AD_{name}"] = env[f"OAUTH_FAKE_{name}"]
    fake, azure = load_settings(environ=env).sign_in.oauth_providers
    assert (fake.name, fake.token_auth) == ("fake", None)
    assert (azure.name, azure.token_auth) == ("azure-ad", "client_secret_post")


@pytest.mark.parametrize("value", ["private_key_jwt", "basic", "none"])
def test_unknown_token_auth_setting_stops_start_up(env: dict[str, str], value: str) -> None:
    env["OAUTH_FAKE_TOKEN_AUTH"] = value
    with pytest.raises(SettingsError, match="OAUTH_FAKE_TOKEN_AUTH"):
        load_settings(environ=env)


# --- the token answer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "access_token"),
    [
        ({"access_token": "abc.DEF-_~+/1==", "token_type": "Bearer"}, "abc.DEF-_~+/1=="),
        ({"access_token": "abc", "token_type": "bearer"}, "abc"),
        ({"access_token": "abc"}, "abc"),  # token_type left out: taken as Bearer
        ({"access_token": "abc", "token_type": "DPoP"}, None),  # needs a proof we do not make
        ({"access_token": "abc def", "token_type": "Bearer"}, None),
        ({"access_token": "abc\r\nX-Injected: 1", "token_type": "Bearer"}, None),
        ({"access_token": "", "token_type": "Bearer"}, None),
        ({"access_token": 42, "token_type": "Bearer"}, None),
        ({"token_type": "Bearer"}, None),
    ],
)
def test_only_a_bearer_access_token_is_kept_for_userinfo(
    answer: dict[str, Any], access_token: str | None
) -> None:
    tokens = token_answer({"id_token": "x.y.z", **answer})
    assert (tokens.id_token, tokens.access_token) == ("x.y.z", access_token)


def test_a_token_answer_without_id_token_is_refused() -> None:
    with pytest.raises(TokenRefused, match="no id_token"):
        token_answer({"access_token": "abc", "token_type": "Bearer"})
