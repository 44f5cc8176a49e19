"""Every refusal of the callback: no session, nothing written, a clear error code, and no
code, ID token or client secret in the answer or the logs."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from tenantd.auth.oauth.flow import FlowState, encode_state
from tenantd.db import Database
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser, SigningKey
from tests.auth.oauth.support import CLIENT_SECRET, PROVIDER, Browser, login_error
from tests.factories import Factory
from tests.helpers import SECRET

TABLES = ("users", "user_identities", "accounts", "memberships", "sessions", "join_requests")


@pytest.fixture(autouse=True)
def capture_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


async def rows(db: Database) -> dict[str, int]:
    return {t: int(await db.fetch_val(f"SELECT count(*) FROM {t}")) for t in TABLES}


def replace_query(path_qs: str, **changes: str) -> str:
    parts = urlsplit(path_qs)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(changes)
    return f"{parts.path}?{urlencode(query)}"


def query_of(path_qs: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(path_qs).query).items()}


async def refused(
    response: aiohttp.ClientResponse,
    code: str,
    *,
    browser: Browser,
    idp: FakeIdP,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal redirect with that code, no session cookies, and nothing secret leaked."""
    assert login_error(response)["error"] == code
    assert browser.cookie("auth_token") is None
    assert browser.cookie("refresh_token") is None
    assert browser.cookie("oauth_state") is None  # cleared on refusals too
    answer = (await response.text()) + repr(dict(response.headers))
    # aiohttp.access is the test server's request log; `tenantd serve` turns it off.
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.__dict__!r}"
        for r in caplog.records
        if r.name != "aiohttp.access"
    )
    secrets = [*idp.codes, CLIENT_SECRET]
    for token in idp.issued_id_tokens:
        secrets += [token, token.split(".")[1]]
    for secret in secrets:
        assert secret not in answer
        assert secret not in logged
    assert any(code in r.getMessage() for r in caplog.records), "refusal not logged"


# --- state ------------------------------------------------------------------------------------


async def test_missing_state_cookie(
    browser: Browser, new_browser: Any, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    path = await browser.authorize(await browser.start())
    other: Browser = await new_browser()  # a browser that never started the flow
    response = await other.callback(path)
    await refused(response, "oauth_state_invalid", browser=other, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 0
    assert set((await rows(db)).values()) == {0}


async def test_state_mismatch(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    path = await browser.authorize(await browser.start())
    forged = replace_query(path, state="attacker-chosen-state-value-0123456789")
    response = await browser.callback(forged)
    await refused(response, "oauth_state_invalid", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 0
    assert set((await rows(db)).values()) == {0}


async def test_tampered_state_cookie(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    path = await browser.authorize(await browser.start())
    value = browser.cookie("oauth_state")
    assert value is not None
    claims = jwt.decode(value, options={"verify_signature": False})
    claims["rt"] = "//evil.example"
    forged = jwt.encode(claims, "not-the-server-secret-" * 3, algorithm="HS256")
    browser.set_state_cookie(forged)
    response = await browser.callback(path)
    await refused(response, "oauth_state_invalid", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 0


async def test_expired_state_cookie(
    new_browser: Any, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    browser: Browser = await new_browser()
    flow = FlowState(
        provider=PROVIDER,
        state="s" * 43,
        nonce="n" * 43,
        code_verifier="v" * 64,
        return_to=None,
        jti="00000000-0000-4000-8000-000000000001",
        expires_at=int(time.time()) - 5,
    )
    browser.set_state_cookie(encode_state(SECRET, flow))
    response = await browser.callback(
        f"/api/v1/auth/oauth/{PROVIDER}/callback?code=abc&state={flow.state}"
    )
    await refused(response, "oauth_state_invalid", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 0


async def test_an_access_token_is_not_a_state_cookie(
    new_browser: Any, idp: FakeIdP, factory: Factory, capture_logs: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    browser: Browser = await new_browser()
    browser.set_state_cookie(cookies["auth_token"])
    response = await browser.callback(
        f"/api/v1/auth/oauth/{PROVIDER}/callback?code=abc&state=anything"
    )
    assert login_error(response)["error"] == "oauth_state_invalid"


async def test_a_state_cookie_is_not_an_access_token(browser: Browser) -> None:
    await browser.start()
    state_cookie = browser.cookie("oauth_state")
    response = await browser.client.get(
        "/api/v1/users/me", headers={"Cookie": f"auth_token={state_cookie}"}
    )
    assert response.status == 401
    assert (await response.json())["error"]["details"]["reason"] == "invalid_session"


async def test_replayed_callback_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    path = await browser.authorize(await browser.start())
    captured_state_cookie = browser.cookie("oauth_state")
    assert (await browser.callback(path)).headers["Location"] == "/"
    # An attacker who captured the whole request (URL and cookie) sends it again.
    browser.client.session.cookie_jar.clear()
    assert captured_state_cookie is not None
    browser.set_state_cookie(captured_state_cookie)
    response = await browser.callback(path)
    await refused(response, "oauth_state_invalid", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 1
    assert (await rows(db))["sessions"] == 1


async def test_replayed_code_is_refused_by_the_provider(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    path = await browser.authorize(await browser.start())
    old_code = query_of(path)["code"]
    assert (await browser.callback(path)).headers["Location"] == "/"
    browser.client.session.cookie_jar.clear()
    # A fresh flow in this browser, finished with the code that was already spent.
    fresh = await browser.authorize(await browser.start())
    response = await browser.callback(replace_query(fresh, code=old_code))
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.token_refusals == ["code replayed"]
    assert (await rows(db))["sessions"] == 1


async def test_stolen_code_without_its_verifier_is_refused(
    browser: Browser, new_browser: Any, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    victim_path = await browser.authorize(await browser.start())
    attacker: Browser = await new_browser()
    own = await attacker.authorize(await attacker.start())
    response = await attacker.callback(replace_query(own, code=query_of(victim_path)["code"]))
    await refused(response, "oauth_failed", browser=attacker, idp=idp, caplog=capture_logs)
    assert idp.token_refusals == ["pkce mismatch"]
    assert set((await rows(db)).values()) == {0}


async def test_provider_error_is_reported_without_its_text(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    idp.authorize_error = "access_denied"
    response = await browser.sign_in()
    await refused(response, "oauth_denied", browser=browser, idp=idp, caplog=capture_logs)
    assert "said no" not in response.headers["Location"]
    assert idp.hits["token"] == 0


# --- the ID token ------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"nonce": "some-other-nonce"}, id="wrong-nonce"),
        pytest.param({"nonce": None}, id="missing-nonce"),
        pytest.param({"exp": _now() - 600, "iat": _now() - 1200}, id="expired"),
        pytest.param({"aud": "another-client"}, id="wrong-audience"),
        pytest.param({"aud": ["tenantd-test-client", "x"], "azp": "x"}, id="wrong-azp"),
        pytest.param({"iss": "http://127.0.0.1:1/other-issuer"}, id="wrong-issuer"),
        pytest.param({"iat": _now() + 3600, "exp": _now() + 7200}, id="issued-in-future"),
        pytest.param({"sub": None}, id="missing-subject"),
    ],
)
async def test_id_token_claims_are_checked(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any, overrides: dict[str, Any]
) -> None:
    idp.claim_overrides = overrides
    response = await browser.sign_in()
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)
    assert set((await rows(db)).values()) == {0}


def _public_pem(idp: FakeIdP) -> bytes:
    key = idp.signing.private_key.public_key()
    pem: bytes = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem


def _unsigned(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, None, algorithm="none")  # type: ignore[arg-type]


def _hs256_with_public_key(idp: FakeIdP) -> Any:
    # The classic key-confusion forgery: HMAC keyed with the provider's public key.
    import hashlib
    import hmac
    import json

    from tests.auth.oauth.fake_idp import b64url

    def sign(claims: dict[str, Any]) -> str:
        header = {"alg": "HS256", "typ": "JWT", "kid": idp.signing.kid}
        head = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        mac = hmac.new(_public_pem(idp), head.encode(), hashlib.sha256).digest()
        return head + "." + b64url(mac)

    return sign


@pytest.mark.parametrize("forgery", ["none", "hs256-client-secret", "hs256-public-key"])
async def test_forbidden_algorithms_are_refused(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any, forgery: str
) -> None:
    if forgery == "none":
        idp.signer = _unsigned
    elif forgery == "hs256-client-secret":
        idp.signer = lambda claims: jwt.encode(claims, CLIENT_SECRET, algorithm="HS256")
    else:
        idp.signer = _hs256_with_public_key(idp)
    response = await browser.sign_in()
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)
    assert set((await rows(db)).values()) == {0}
    assert idp.hits["jwks"] == 0  # refused on its header, before any key is looked up


async def test_key_type_must_match_the_algorithm(
    browser: Browser, idp: FakeIdP, capture_logs: Any
) -> None:
    ec_key = SigningKey.ec(kid=idp.signing.kid)  # same kid as the published RSA key
    idp.signer = ec_key.sign
    response = await browser.sign_in()
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)


async def test_unknown_signing_key_refetches_once_then_is_rate_limited(
    new_browser: Any, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    first: Browser = await new_browser()
    assert (await first.sign_in()).headers["Location"] == "/"
    assert idp.hits["jwks"] == 1
    stranger = SigningKey.rsa(kid="never-published")
    idp.signer = stranger.sign
    second: Browser = await new_browser()
    response = await second.sign_in()
    await refused(response, "oauth_failed", browser=second, idp=idp, caplog=capture_logs)
    assert idp.hits["jwks"] == 2  # one refetch for the unknown kid
    third: Browser = await new_browser()
    response = await third.sign_in()
    await refused(response, "oauth_failed", browser=third, idp=idp, caplog=capture_logs)
    assert idp.hits["jwks"] == 2  # rate-limited: no second refetch
    assert (await rows(db))["sessions"] == 1


# --- email ---------------------------------------------------------------------------------


@pytest.mark.parametrize("verified", [False, None, "false"], ids=["false", "missing", "string"])
async def test_unverified_email_writes_nothing(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any, verified: Any
) -> None:
    idp.user = FakeUser(email_verified=verified)
    response = await browser.sign_in()
    await refused(response, "email_not_verified", browser=browser, idp=idp, caplog=capture_logs)
    assert set((await rows(db)).values()) == {0}


async def test_unverified_email_does_not_link_an_existing_user(
    browser: Browser, idp: FakeIdP, db: Database, factory: Factory, capture_logs: Any
) -> None:
    await factory.user(email="alice@example.org")
    before = await rows(db)
    idp.user = FakeUser(email_verified=False)
    response = await browser.sign_in()
    await refused(response, "email_not_verified", browser=browser, idp=idp, caplog=capture_logs)
    assert await rows(db) == before
    assert before["user_identities"] == 0 and before["sessions"] == 0


async def test_returning_identity_with_unverified_email_is_refused(
    new_browser: Any, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    first: Browser = await new_browser()
    assert (await first.sign_in()).headers["Location"] == "/"
    idp.user = FakeUser(email_verified=False)
    second: Browser = await new_browser()
    response = await second.sign_in()
    await refused(response, "email_not_verified", browser=second, idp=idp, caplog=capture_logs)
    assert (await rows(db))["sessions"] == 1


async def test_missing_email_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    idp.user = FakeUser(email=None)
    response = await browser.sign_in()
    await refused(response, "email_missing", browser=browser, idp=idp, caplog=capture_logs)
    assert set((await rows(db)).values()) == {0}


# --- the provider ----------------------------------------------------------------------------


async def test_wrong_client_secret_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    idp.client_secret = "rotated-at-the-provider"
    response = await browser.sign_in()
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.token_refusals == ["client credentials"]


async def test_callback_iss_naming_another_provider_is_refused(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any
) -> None:
    idp.iss_in_callback = "https://mix-up.example"
    response = await browser.sign_in()
    await refused(response, "oauth_failed", browser=browser, idp=idp, caplog=capture_logs)
    assert idp.hits["token"] == 0


async def test_callback_iss_naming_the_provider_is_accepted(browser: Browser, idp: FakeIdP) -> None:
    idp.iss_in_callback = idp.issuer
    assert (await browser.sign_in()).headers["Location"] == "/"


async def test_discovery_naming_another_issuer_makes_the_provider_unavailable(
    browser: Browser, idp: FakeIdP, capture_logs: Any
) -> None:
    idp.discovery_overrides = {"issuer": "https://accounts.example.com"}
    response = await browser.client.get(
        f"/api/v1/auth/oauth/{PROVIDER}/start", allow_redirects=False
    )
    assert login_error(response) == {"error": "oauth_unavailable"}
    assert browser.cookie("oauth_state") is None
    assert idp.hits["authorize"] == 0


async def test_unreachable_token_endpoint_is_reported_unavailable(
    browser: Browser, idp: FakeIdP, db: Database, capture_logs: Any, free_tcp_port: int
) -> None:
    port = free_tcp_port
    idp.discovery_overrides = {"token_endpoint": f"http://127.0.0.1:{port}/token"}
    response = await browser.sign_in()
    await refused(response, "oauth_unavailable", browser=browser, idp=idp, caplog=capture_logs)
    assert set((await rows(db)).values()) == {0}


async def test_client_secret_post_and_es256_keys_work(browser: Browser, idp: FakeIdP) -> None:
    idp.auth_method = "client_secret_post"
    idp.rotate(key=SigningKey.ec())
    assert (await browser.sign_in()).headers["Location"] == "/"
    assert idp.client_auth_seen == ["post"]
    assert [p["provider"] for p in (await browser.me())["authProviders"]] == [PROVIDER]
