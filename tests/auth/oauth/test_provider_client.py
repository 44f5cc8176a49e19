"""Discovery, JWKS caching and rotation, the token request, and the pure protocol pieces."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tenantd.auth.oauth import errors
from tenantd.auth.oauth.client import OidcClient
from tenantd.auth.oauth.discovery import DiscoveryCache, parse_metadata, require_safe_url
from tenantd.auth.oauth.errors import OAuthRefused, ProviderError, TokenRefused
from tenantd.auth.oauth.flow import (
    code_challenge,
    decode_state,
    encode_state,
    new_flow_state,
    read_header,
    safe_return_to,
    verify_id_token,
)
from tenantd.auth.oauth.jwks import JwksCache, parse_jwks
from tenantd.errors import Unauthorized
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.settings import OAuthProviderSettings
from tenantd.identity.tokens import decode_access_token, issue_access_token
from tests.auth.oauth.fake_idp import FakeIdP, IssuedCode, SigningKey, b64url
from tests.auth.oauth.support import CLIENT_ID, CLIENT_SECRET, REDIRECT_URI, Browser

KEY = "unit-test-secret-key-0123456789-abcdefghijklmnop"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def provider(idp: FakeIdP, secret: str = CLIENT_SECRET) -> OAuthProviderSettings:
    return OAuthProviderSettings(
        name="fake", issuer=idp.issuer, client_id=CLIENT_ID, client_secret=secret
    )


# --- URLs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://accounts.google.com",
        "http://127.0.0.1:8081",
        "http://127.8.9.10/x",
        "http://localhost:9000",
        "http://[::1]:9000/realms/x",
    ],
)
def test_https_or_loopback_http_is_allowed(url: str) -> None:
    assert require_safe_url(url, what="issuer") == url


@pytest.mark.parametrize(
    "url",
    [
        "http://accounts.example.com",
        "http://10.0.0.5",
        "http://127.0.0.1.evil.example",
        "ftp://127.0.0.1",
        "https://user:pw@accounts.example.com",
        "https://accounts.example.com/#frag",
        "",
        "not a url",
    ],
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ProviderError):
        require_safe_url(url, what="issuer")


# --- discovery ---------------------------------------------------------------------------------


async def test_discovery_is_cached_and_shared_by_concurrent_callers(
    idp: FakeIdP, http: aiohttp.ClientSession
) -> None:
    clock = Clock()
    cache = DiscoveryCache(http, ttl=60, clock=clock)
    results = await asyncio.gather(*(cache.get(idp.issuer) for _ in range(10)))
    assert {r.token_endpoint for r in results} == {f"{idp.issuer}/token"}
    assert results[0].token_auth_method == "client_secret_basic"
    assert idp.hits["discovery"] == 1
    clock.now += 59
    await cache.get(idp.issuer)
    assert idp.hits["discovery"] == 1
    clock.now += 2
    await cache.get(idp.issuer)
    assert idp.hits["discovery"] == 2


async def test_discovery_keeps_the_last_good_copy_when_a_refresh_fails(
    idp: FakeIdP, http: aiohttp.ClientSession
) -> None:
    clock = Clock()
    cache = DiscoveryCache(http, ttl=60, clock=clock)
    first = await cache.get(idp.issuer)
    idp.discovery_overrides = {"issuer": "https://someone-else.example"}
    clock.now += 61
    assert await cache.get(idp.issuer) == first
    fresh = DiscoveryCache(http, ttl=60, clock=clock)
    with pytest.raises(ProviderError, match="different issuer"):
        await fresh.get(idp.issuer)


@pytest.mark.parametrize(
    "overrides",
    [
        {"token_endpoint": "http://tokens.example.com/token"},
        {"jwks_uri": "http://keys.example.com/jwks"},
        {"authorization_endpoint": "javascript:alert(1)"},
        {"token_endpoint_auth_methods_supported": ["private_key_jwt"]},
        {"code_challenge_methods_supported": ["plain"]},
    ],
)
async def test_unusable_discovery_documents_are_refused(
    idp: FakeIdP, http: aiohttp.ClientSession, overrides: dict[str, Any]
) -> None:
    idp.discovery_overrides = overrides
    with pytest.raises(ProviderError):
        await DiscoveryCache(http).get(idp.issuer)


def test_issuer_with_trailing_slash_is_kept_as_published() -> None:
    document = {
        "issuer": "https://tenant.auth.example/",
        "authorization_endpoint": "https://tenant.auth.example/authorize",
        "token_endpoint": "https://tenant.auth.example/oauth/token",
        "jwks_uri": "https://tenant.auth.example/.well-known/jwks.json",
        "token_endpoint_auth_methods_supported": ["client_secret_post"],
    }
    # Settings strip the slash; ID tokens must still carry the issuer exactly as published.
    metadata = parse_metadata(document, configured_issuer="https://tenant.auth.example")
    assert metadata.issuer == "https://tenant.auth.example/"
    assert metadata.token_auth_method == "client_secret_post"
    with pytest.raises(ProviderError):
        parse_metadata(document, configured_issuer="https://tenant.auth.example/other")


async def test_non_loopback_http_issuer_is_never_fetched(http: aiohttp.ClientSession) -> None:
    with pytest.raises(ProviderError, match="https"):
        await DiscoveryCache(http).get("http://accounts.example.com")


async def test_slow_provider_times_out(aiohttp_server: Any) -> None:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()  # never answers while the client waits
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", hang)
    server = await aiohttp_server(app)
    issuer = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as session:
        cache = DiscoveryCache(session, client_timeout=aiohttp.ClientTimeout(total=0.2))
        try:
            # Only the client's own timeout can end this; the outer bound is generous (the
            # machine may be busy) and fails the test if that timeout does not work.
            with pytest.raises(ProviderError, match="TimeoutError"):
                await asyncio.wait_for(cache.get(issuer), 30)
        finally:
            release.set()


# --- JWKS --------------------------------------------------------------------------------------


async def test_rotation_fetches_the_new_key_once(idp: FakeIdP, http: aiohttp.ClientSession) -> None:
    clock = Clock()
    cache = JwksCache(http, refetch_interval=30, clock=clock)
    uri = f"{idp.issuer}/jwks"
    old = idp.signing
    assert await cache.key(uri, kid=old.kid, algorithm="RS256") is not None
    assert await cache.key(uri, kid=old.kid, algorithm="RS256") is not None
    assert idp.hits["jwks"] == 1
    new = idp.rotate()
    clock.now += 1  # rotation right after the first fetch is still picked up
    found = await cache.key(uri, kid=new.kid, algorithm="RS256")
    assert found is not None
    assert idp.hits["jwks"] == 2
    assert await cache.key(uri, kid=new.kid, algorithm="RS256") is not None
    assert idp.hits["jwks"] == 2


async def test_unknown_kids_refetch_at_most_once_per_interval(
    idp: FakeIdP, http: aiohttp.ClientSession
) -> None:
    clock = Clock()
    cache = JwksCache(http, refetch_interval=30, clock=clock)
    uri = f"{idp.issuer}/jwks"
    await cache.key(uri, kid=idp.signing.kid, algorithm="RS256")
    results = await asyncio.gather(
        *(cache.key(uri, kid=f"made-up-{n}", algorithm="RS256") for n in range(20))
    )
    assert results == [None] * 20
    assert idp.hits["jwks"] == 2  # the first fetch and one refetch, not twenty
    clock.now += 31
    assert await cache.key(uri, kid="made-up-again", algorithm="RS256") is None
    assert idp.hits["jwks"] == 3


async def test_key_set_expires_after_its_ttl(idp: FakeIdP, http: aiohttp.ClientSession) -> None:
    clock = Clock()
    cache = JwksCache(http, ttl=100, clock=clock)
    uri = f"{idp.issuer}/jwks"
    await cache.key(uri, kid=idp.signing.kid, algorithm="RS256")
    clock.now += 101
    await cache.key(uri, kid=idp.signing.kid, algorithm="RS256")
    assert idp.hits["jwks"] == 2


def test_only_asymmetric_signing_keys_are_kept() -> None:
    rsa_key = SigningKey.rsa(kid="rsa")
    ec_key = SigningKey.ec(kid="ec")
    small = SigningKey("small", "RS256", rsa.generate_private_key(65537, key_size=1024))
    document = {
        "keys": [
            rsa_key.public_jwk(),
            ec_key.public_jwk(),
            {"kty": "oct", "kid": "hmac", "k": b64url(b"shared-secret-bytes")},
            {**SigningKey.rsa(kid="enc").public_jwk(), "use": "enc"},
            {**SigningKey.rsa(kid="rs512").public_jwk(), "alg": "RS512"},
            small.public_jwk(),
            "not-a-key",
        ]
    }
    keys = parse_jwks(document)
    assert sorted(k for k in keys if k) == ["ec", "rsa"]
    assert keys["rsa"].algorithm_name == "RS256"
    assert keys["ec"].algorithm_name == "ES256"


# --- token request -----------------------------------------------------------------------------


async def _code(idp: FakeIdP, verifier: str) -> str:
    code = f"code-{uuid.uuid4().hex}"
    idp.codes[code] = IssuedCode(
        client_id=CLIENT_ID,
        redirect_uri=REDIRECT_URI,
        nonce="n",
        challenge=code_challenge(verifier),
        user=idp.user,
    )
    return code


async def test_a_code_is_exchanged_once(idp: FakeIdP, http: aiohttp.ClientSession) -> None:
    client = OidcClient(http)
    metadata = await client.metadata(provider(idp))
    verifier = "v" * 50
    code = await _code(idp, verifier)
    kwargs: dict[str, Any] = {"code": code, "code_verifier": verifier, "redirect_uri": REDIRECT_URI}
    tokens = await client.exchange_code(provider(idp), metadata, **kwargs)
    assert jwt.get_unverified_header(tokens.id_token)["kid"] == idp.signing.kid
    assert tokens.access_token in idp.access_tokens
    with pytest.raises(TokenRefused, match="invalid_grant"):
        await client.exchange_code(provider(idp), metadata, **kwargs)
    assert idp.token_refusals == ["code replayed"]


async def test_redirect_uri_must_match_the_authorization_request(
    idp: FakeIdP, http: aiohttp.ClientSession
) -> None:
    client = OidcClient(http)
    metadata = await client.metadata(provider(idp))
    code = await _code(idp, "v" * 50)
    with pytest.raises(TokenRefused):
        await client.exchange_code(
            provider(idp),
            metadata,
            code=code,
            code_verifier="v" * 50,
            redirect_uri="http://127.0.0.1:8080/elsewhere",
        )
    assert idp.token_refusals == ["redirect_uri mismatch"]


async def test_basic_client_auth_form_encodes_the_credentials(
    idp: FakeIdP, http: aiohttp.ClientSession
) -> None:
    odd_secret = "p@ss:w rd/+%=="
    idp.client_secret = odd_secret
    client = OidcClient(http)
    metadata = await client.metadata(provider(idp, odd_secret))
    code = await _code(idp, "v" * 50)
    await client.exchange_code(
        provider(idp, odd_secret),
        metadata,
        code=code,
        code_verifier="v" * 50,
        redirect_uri=REDIRECT_URI,
    )
    assert idp.client_auth_seen == ["basic"]


async def test_refusal_carries_only_the_error_code(
    aiohttp_server: Any, http: aiohttp.ClientSession, idp: FakeIdP
) -> None:
    async def token(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": "invalid_grant", "error_description": "code c0de-SECRET was used"},
            status=400,
        )

    app = web.Application()
    app.router.add_post("/token", token)
    server = await aiohttp_server(app)
    client = OidcClient(http)
    metadata = await client.metadata(provider(idp))
    from dataclasses import replace

    elsewhere = replace(metadata, token_endpoint=str(server.make_url("/token")))
    with pytest.raises(TokenRefused) as refused:
        await client.exchange_code(
            provider(idp), elsewhere, code="c0de-SECRET", code_verifier="v" * 50, redirect_uri="x"
        )
    assert "invalid_grant" in str(refused.value)
    assert "SECRET" not in str(refused.value)


# --- state cookie and ID token -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/", "/"),
        ("/dashboard?x=1#top", "/dashboard?x=1#top"),
        ("//evil.example", None),
        ("/\\evil.example", None),
        ("/a\\b", None),
        ("https://evil.example", None),
        ("javascript:alert(1)", None),
        ("relative/path", None),
        ("/tab\there", None),
        ("/a b", None),
        ("/" + "x" * 3000, None),
        (None, None),
        ("", None),
    ],
)
def test_return_to_accepts_only_same_origin_paths(value: str | None, expected: str | None) -> None:
    assert safe_return_to(value) == expected


def test_state_cookie_round_trip_and_purpose() -> None:
    flow = new_flow_state("fake", "/next")
    token = encode_state(KEY, flow)
    assert decode_state(KEY, token, provider="fake") == flow
    with pytest.raises(OAuthRefused) as other_provider:
        decode_state(KEY, token, provider="google")
    assert other_provider.value.code == errors.STATE_INVALID
    # Neither token passes for the other (access tokens in HS256 mode share the secret).
    keyring = Keyring(algorithm="HS256", secret_key=KEY)
    with pytest.raises(Unauthorized):
        decode_access_token(keyring, token)
    access, _claims = issue_access_token(keyring, user_id=uuid.uuid4(), account_id=None)
    with pytest.raises(OAuthRefused):
        decode_state(KEY, access, provider="fake")


def test_state_cookie_signed_with_another_key_is_refused() -> None:
    token = encode_state("another-secret-key-0123456789-abcdefghij", new_flow_state("fake", None))
    with pytest.raises(OAuthRefused):
        decode_state(KEY, token, provider="fake")


def test_new_flows_are_unpredictable() -> None:
    flows = [new_flow_state("fake", None) for _ in range(50)]
    for name in ("state", "nonce", "code_verifier", "jti"):
        assert len({getattr(f, name) for f in flows}) == 50
    verifier = flows[0].code_verifier
    assert 43 <= len(verifier) <= 128
    assert code_challenge(verifier) == b64url(
        __import__("hashlib").sha256(verifier.encode()).digest()
    )


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": "https://issuer.example",
        "sub": "subject",
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 300,
        "nonce": "the-nonce",
        "email": " Bob@EXAMPLE.org ",
        "email_verified": "true",
    }
    claims.update(overrides)
    return claims


def _verify(token: str, key: SigningKey) -> Any:
    return verify_id_token(
        token,
        key.private_key.public_key(),
        algorithm=key.algorithm,
        issuer="https://issuer.example",
        client_id=CLIENT_ID,
        nonce="the-nonce",
    )


def test_id_token_identity_is_normalised() -> None:
    key = SigningKey.rsa()
    identity = _verify(key.sign(_claims()), key)
    assert identity.subject == "subject"
    assert identity.email == "bob@example.org"  # the service's one normal form
    assert identity.email_verified is True  # the string form some providers send


@pytest.mark.parametrize("email", ["not-an-email", "a@b", 42, "a @b.example"])
def test_unusable_email_claims_count_as_missing(email: Any) -> None:
    key = SigningKey.rsa()
    assert _verify(key.sign(_claims(email=email)), key).email is None


def test_id_token_within_clock_skew_is_accepted_beyond_it_refused() -> None:
    key = SigningKey.ec()
    now = int(time.time())
    assert _verify(key.sign(_claims(exp=now - 30)), key).subject == "subject"
    with pytest.raises(OAuthRefused, match="expired"):
        _verify(key.sign(_claims(exp=now - 120)), key)


@pytest.mark.parametrize("algorithm", ["none", "HS256", "HS512", "RS512", "PS256"])
def test_only_rs256_and_es256_headers_pass(algorithm: str) -> None:
    token = jwt.encode(_claims(), None, algorithm="none")  # type: ignore[arg-type]
    body = token.split(".")[1]
    forged_head = b64url(orjson.dumps({"alg": algorithm, "typ": "JWT"}))
    with pytest.raises(OAuthRefused, match="algorithm"):
        read_header(f"{forged_head}.{body}.")
    key = SigningKey.rsa()
    with pytest.raises(OAuthRefused, match="algorithm"):
        verify_id_token(
            key.sign(_claims()),
            key.private_key.public_key(),
            algorithm=algorithm,
            issuer="https://issuer.example",
            client_id=CLIENT_ID,
            nonce="the-nonce",
        )


def test_multi_audience_token_needs_our_azp() -> None:
    key = SigningKey.rsa()
    assert _verify(key.sign(_claims(aud=[CLIENT_ID, "x"], azp=CLIENT_ID)), key)
    with pytest.raises(OAuthRefused, match="authorized party"):
        _verify(key.sign(_claims(aud=[CLIENT_ID, "x"])), key)


async def test_rotation_end_to_end(new_browser: Any, idp: FakeIdP) -> None:
    """The provider rotates its key between two sign-ins; the new kid is fetched once."""
    first: Browser = await new_browser()
    assert (await first.sign_in()).headers["Location"] == "/"
    assert idp.hits["jwks"] == 1
    idp.rotate()  # the old key is no longer published
    second: Browser = await new_browser()
    assert (await second.sign_in()).headers["Location"] == "/"
    assert idp.hits["jwks"] == 2
    third: Browser = await new_browser()
    assert (await third.sign_in()).headers["Location"] == "/"
    assert idp.hits["jwks"] == 2
    assert idp.hits["discovery"] == 1  # metadata cached across the flows
    me = await third.me()
    assert me["user"]["email"] == "alice@example.org"
