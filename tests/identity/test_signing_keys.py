"""Access tokens signed with keys kept in PostgreSQL: algorithms, the JWKS, rotation with
overlap, retirement, two instances on one database, encryption at rest, hostile tokens."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.identity.keys import material, service
from tenantd.identity.keys.feed import prepare
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.keys.sweeps import keys_sweep
from tenantd.identity.tokens import issue_access_token
from tenantd.ops.sweeps import run_sweep
from tenantd.settings import Settings
from tests.helpers import ORIGIN, SECRET, eventually
from tests.identity.keyhelpers import (
    me_status,
    outlive,
    sign_in,
    signing_kid,
    signs_with,
    take_over_now,
)

JWKS = "/.well-known/jwks.json"
NONE_HEADER = b'{"alg":"none"}'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def header_of(token: str) -> dict[str, Any]:
    return jwt.get_unverified_header(token)


async def published(client: Any) -> dict[str, Any]:
    response = await client.get(JWKS)
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


def verify_with_jwks(token: str, jwks: dict[str, Any], **options: Any) -> dict[str, Any]:
    """As an outside service verifies: PyJWT, the key the JWKS names by kid."""
    key = jwt.PyJWKSet.from_dict(jwks)[header_of(token)["kid"]]
    payload: dict[str, Any] = jwt.decode(
        token, key, algorithms=[key.algorithm_name], issuer="tenantd", **options
    )
    return payload


async def rotate(db: Database, settings: Settings) -> str:
    async with db.transaction() as conn:
        row = await service.rotate(conn, settings)
    return str(row["kid"])


# -- algorithms ---------------------------------------------------------------------------


@pytest.fixture
def alg() -> str | None:
    return None  # the default, EdDSA; tests parametrize it


@pytest.fixture
def audience() -> str | None:
    return None


@pytest.fixture
def env(env: dict[str, str], alg: str | None, audience: str | None) -> dict[str, str]:
    if alg is not None:
        env["ACCESS_TOKEN_ALG"] = alg
    if audience is not None:
        env["ACCESS_TOKEN_AUDIENCE"] = audience
    return env


async def test_default_tokens_are_eddsa_with_a_kid_the_jwks_publishes(
    client: Any, factory: Any, app: web.Application
) -> None:
    user = await factory.user()
    token = await sign_in(client, user)
    assert header_of(token)["alg"] == "EdDSA"
    jwks = await published(client)
    payload = verify_with_jwks(token, jwks)
    assert payload["sub"] == str(user.id) and payload["aid"] == str(user.account_id)
    assert payload["sid"] is not None and "aud" not in payload
    assert header_of(token)["kid"] == signing_kid(app)


@pytest.mark.parametrize("alg", ["ES256"])
async def test_es256_mode_signs_with_p256(alg: str, client: Any, factory: Any) -> None:
    user = await factory.user()
    token = await sign_in(client, user)
    assert header_of(token)["alg"] == "ES256"
    jwks = await published(client)
    [key] = jwks["keys"]
    assert (key["kty"], key["crv"], key["alg"]) == ("EC", "P-256", "ES256")
    assert verify_with_jwks(token, jwks)["sub"] == str(user.id)
    assert await me_status(client, token) == 200


@pytest.mark.parametrize("alg", ["HS256"])
async def test_hs256_mode_signs_with_the_secret_and_publishes_nothing(
    alg: str, client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    token = await sign_in(client, user)
    assert header_of(token) == {"alg": "HS256", "typ": "JWT"}  # no kid: SECRET_KEY signs
    payload = jwt.decode(token, SECRET, algorithms=["HS256"], issuer="tenantd")
    assert payload["sub"] == str(user.id)
    assert await me_status(client, token) == 200
    assert (await published(client)) == {"keys": []}
    assert await db.fetch_val("SELECT count(*) FROM signing_keys") == 0


@pytest.mark.parametrize("audience", ["https://api.example.com"])
async def test_audience_is_set_and_checked(audience: str, client: Any, factory: Any) -> None:
    user = await factory.user()
    token = await sign_in(client, user)
    jwks = await published(client)
    assert verify_with_jwks(token, jwks, audience="https://api.example.com")["aud"] == (
        "https://api.example.com"
    )
    with pytest.raises(jwt.InvalidAudienceError):
        verify_with_jwks(token, jwks, audience="https://other.example.com")
    assert await me_status(client, token) == 200


# -- the JWKS -----------------------------------------------------------------------------


async def test_jwks_is_public_cacheable_and_holds_no_private_member(
    client: Any, db: Database, settings: Settings
) -> None:
    response = await client.get(JWKS)
    assert response.status == 200
    assert response.headers["Cache-Control"] == "public, max-age=300"
    assert response.headers["Content-Type"].startswith("application/json")
    await rotate(db, settings)
    app = client.server.app
    await eventually(lambda: len(app[DOMAINS].identity.keyring.keys) == 2)
    jwks = await published(client)
    assert len(jwks["keys"]) == 2  # current and next
    for key in jwks["keys"]:
        assert not material.PRIVATE_MEMBERS & set(key), key
        assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert key["use"] == "sig" and key["alg"] == "EdDSA"
    body = await (await client.get(JWKS)).text()
    for row in await db.fetch_all("SELECT private_key FROM signing_keys"):
        assert b64(bytes(row["private_key"])) not in body


async def test_a_next_key_is_published_a_cache_lifetime_before_it_signs(
    client: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    first = signing_kid(app)
    assert first is not None
    new = await rotate(db, settings)
    rows = {r["kid"]: r for r in await db.fetch_all("SELECT * FROM signing_keys")}
    lead = rows[new]["signing_from"] - rows[new]["published_at"]
    assert lead.total_seconds() >= 300
    # The current key retires when the next takes over; published until its tokens expired.
    assert rows[first]["retired_at"] == rows[new]["signing_from"]
    assert (rows[first]["not_after"] - rows[first]["retired_at"]).total_seconds() >= 900
    await eventually(lambda: new in app[DOMAINS].identity.keyring.keys)
    assert signing_kid(app) == first  # published, not signing yet
    assert {k["kid"] for k in (await published(client))["keys"]} == {first, new}
    # A second rotation while one is pending is refused.
    with pytest.raises(Exception, match="pending"):
        await rotate(db, settings)


# -- rotation and retirement ------------------------------------------------------------


async def test_a_token_of_the_previous_key_verifies_during_the_overlap(
    client: Any, factory: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    user = await factory.user()
    old_token = await sign_in(client, user)
    old_kid = header_of(old_token)["kid"]
    new = await rotate(db, settings)
    await take_over_now(db, new)
    await signs_with(app, new)
    new_token = await sign_in(client, user)
    assert header_of(new_token)["kid"] == new
    app[DOMAINS].identity.principal_cache.flush()  # verified afresh, not only from the cache
    assert await me_status(client, old_token) == 200
    assert await me_status(client, new_token) == 200
    jwks = await published(client)
    assert {k["kid"] for k in jwks["keys"]} == {old_kid, new}
    assert verify_with_jwks(old_token, jwks)["sub"] == str(user.id)
    views = {v.kid: v.state for v in await list_keys(db)}
    assert views == {old_kid: "retired", new: "current"}


async def list_keys(db: Database) -> list[service.KeyView]:
    async with db.connection() as conn:
        return await service.list_keys(conn)


async def test_a_retired_keys_tokens_are_refused_once_it_is_unpublished(
    client: Any, factory: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    user = await factory.user()
    old_token = await sign_in(client, user)
    old_kid = header_of(old_token)["kid"]
    assert await me_status(client, old_token) == 200  # memoised and cached now
    new = await rotate(db, settings)
    await take_over_now(db, new)
    await outlive(db, old_kid)
    await eventually(lambda: not app[DOMAINS].identity.keyring.trusts(old_kid))
    # The token's own exp is still ahead: the key's end alone refuses it.
    assert jwt.decode(old_token, options={"verify_signature": False})["exp"] > time.time()
    assert await me_status(client, old_token) == 401
    assert old_kid not in {k["kid"] for k in (await published(client))["keys"]}
    # The sweep wipes the retired key's private part.
    outcome = await run_sweep(app[DOMAINS], keys_sweep)
    assert outcome.status == "ok", outcome
    row = await db.fetch_one(
        "SELECT private_key FROM signing_keys WHERE kid = %(k)s", {"k": old_kid}
    )
    assert row is not None and row["private_key"] is None


async def test_retire_now_ends_a_compromised_key_at_once(
    client: Any, factory: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    user = await factory.user()
    token = await sign_in(client, user)
    kid = header_of(token)["kid"]
    async with db.transaction() as conn:
        with pytest.raises(Exception, match="rotate"):
            await service.retire(conn, settings, kid, now=True)  # no successor yet
    new = await rotate(db, settings)
    async with db.transaction() as conn:
        view = await service.retire(conn, settings, kid, now=True)
    assert view.state == "expired"
    await signs_with(app, new)
    assert await me_status(client, token) == 401
    assert header_of(await sign_in(client, user))["kid"] == new


async def test_retiring_a_next_key_withdraws_it_and_keeps_the_current_one(
    client: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    current = signing_kid(app)
    new = await rotate(db, settings)
    # Heard first: otherwise "not in the keyring" below holds before the rotation is heard,
    # and a reload that read the rotation could still publish it after the check.
    await eventually(lambda: new in app[DOMAINS].identity.keyring.keys)
    async with db.transaction() as conn:
        await service.retire(conn, settings, new)
    states = {v.kid: v.state for v in await list_keys(db)}
    assert states == {current: "current", new: "expired"}
    row = await db.fetch_one(
        "SELECT retired_at FROM signing_keys WHERE kid = %(k)s", {"k": current}
    )
    assert row is not None and row["retired_at"] is None  # its hand-over is cancelled
    await eventually(lambda: new not in app[DOMAINS].identity.keyring.keys)
    assert {k["kid"] for k in (await published(client))["keys"]} == {current}


async def test_two_instances_sign_and_verify_each_others_tokens_across_a_rotation(
    client: Any, factory: Any, db: Database, settings: Settings, migrated: str, aiohttp_client: Any
) -> None:
    other = await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})
    a, b = client.server.app, other.server.app
    assert signing_kid(a) == signing_kid(b) is not None  # one key, created once
    user = await factory.user()
    from_a, from_b = await sign_in(client, user), await sign_in(other, user)
    assert await me_status(other, from_a) == 200 and await me_status(client, from_b) == 200

    new = await rotate(db, settings)  # as `tenantd keys rotate` does, from outside both
    await take_over_now(db, new)
    await signs_with(a, new)
    await signs_with(b, new)
    after_a, after_b = await sign_in(client, user), await sign_in(other, user)
    assert header_of(after_a)["kid"] == header_of(after_b)["kid"] == new
    for token in (from_a, from_b, after_a, after_b):
        assert await me_status(client, token) == 200
        assert await me_status(other, token) == 200


async def test_the_rotation_sweep_rotates_when_due_once(
    client: Any, db: Database, settings: Settings
) -> None:
    app = client.server.app
    await db.execute(
        "UPDATE signing_keys SET published_at = now() - interval '31 days',"
        " signing_from = now() - interval '31 days'"
    )
    outcomes = await asyncio.gather(
        run_sweep(app[DOMAINS], keys_sweep), run_sweep(app[DOMAINS], keys_sweep)
    )
    assert sorted(o.status for o in outcomes) in (["locked", "ok"], ["ok", "ok"])
    again = await run_sweep(app[DOMAINS], keys_sweep)
    assert again.status == "ok"
    states = sorted(v.state for v in await list_keys(db))
    assert states == ["current", "next"]  # exactly one rotation


async def test_the_sweep_does_not_rotate_a_young_key(client: Any, db: Database) -> None:
    outcome = await run_sweep(client.server.app[DOMAINS], keys_sweep)
    assert outcome.status == "ok"
    assert [v.state for v in await list_keys(db)] == ["current"]


async def test_concurrent_first_starts_create_one_key(db: Database, settings: Settings) -> None:
    keyrings = [Keyring(algorithm="EdDSA", secret_key=settings.secret_key) for _ in range(5)]
    await asyncio.gather(*(prepare(db, settings, keyring) for keyring in keyrings))
    assert await db.fetch_val("SELECT count(*) FROM signing_keys") == 1
    kids = {keyring.signing_key().kid for keyring in keyrings}  # type: ignore[union-attr]
    assert len(kids) == 1


# -- keys at rest ---------------------------------------------------------------------------


async def test_private_keys_are_encrypted_under_the_secret_key(client: Any, db: Database) -> None:
    row = await db.fetch_one("SELECT kid, private_key, public_jwk FROM signing_keys")
    assert row is not None
    stored = bytes(row["private_key"])
    private = material.decrypt_private(SECRET, row["kid"], stored)
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    assert raw not in stored
    assert material.decrypt_private("another-secret-" * 4, row["kid"], stored) is None
    assert material.decrypt_private(SECRET, "another-kid", stored) is None  # bound to its row


# -- hostile tokens -------------------------------------------------------------------------


def _claims(user: Any) -> dict[str, Any]:
    now = time.time()
    return {
        "sub": str(user.id),
        "aid": str(user.account_id),
        "sid": None,
        "jti": str(uuid.uuid4()),
        "iat": now,
        "exp": int(now) + 900,
        "iss": "tenantd",
    }


def _hs256(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    """HS256 by hand (PyJWT refuses public keys as HMAC secrets, an attacker does not)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    digest = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(digest)}"


async def test_hostile_tokens_are_refused(client: Any, factory: Any, db: Database) -> None:
    user = await factory.user()
    good = await sign_in(client, user)
    kid = header_of(good)["kid"]
    jwk = (await published(client))["keys"][0]
    public = material.public_key("EdDSA", jwk)
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    header, payload, signature = good.split(".")
    forged_payload = b64(json.dumps({**_claims(user), "sub": str(uuid.uuid4())}).encode())
    impostor = ed25519.Ed25519PrivateKey.generate()
    # Past the HS256 transition window (see the next test), SECRET_KEY signs nothing.
    await db.execute(
        "UPDATE signing_keys SET published_at = now() - interval '1 hour',"
        " signing_from = now() - interval '1 hour'"
    )
    app = client.server.app
    await eventually(lambda: not app[DOMAINS].identity.keyring.trusts(None))
    hostile = {
        "tampered payload": f"{header}.{forged_payload}.{signature}",
        "tampered signature": f"{header}.{payload}.{signature[:-4]}AAAA",
        "alg none": f"{b64(NONE_HEADER)}.{b64(json.dumps(_claims(user)).encode())}.",
        "alg none with kid": (
            f"{b64(json.dumps({'alg': 'none', 'kid': kid}).encode())}."
            f"{b64(json.dumps(_claims(user)).encode())}."
        ),
        "HS256 with the PEM public key": _hs256({"alg": "HS256", "kid": kid}, _claims(user), pem),
        "HS256 with the PEM, no kid": _hs256({"alg": "HS256"}, _claims(user), pem),
        "HS256 with the raw public key": _hs256({"alg": "HS256", "kid": kid}, _claims(user), raw),
        "HS256 with the JWK": _hs256(
            {"alg": "HS256", "kid": kid}, _claims(user), json.dumps(jwk).encode()
        ),
        "HS256 with SECRET_KEY": jwt.encode(_claims(user), SECRET, "HS256"),
        "our kid, another key": jwt.encode(_claims(user), impostor, "EdDSA", headers={"kid": kid}),
        "unknown kid": jwt.encode(_claims(user), impostor, "EdDSA", headers={"kid": "nope"}),
        "ES256 header on an EdDSA kid": _with_header(good, alg="ES256"),
        "kid not a string": _with_header(good, kid=7),
    }
    for name, token in hostile.items():
        assert await me_status(client, token) == 401, name
    assert await me_status(client, good) == 200


def _with_header(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    return f"{b64(json.dumps({**decoded, **changes}).encode())}.{payload}.{signature}"


async def test_hs256_tokens_are_honoured_only_while_eddsa_begins(
    client: Any, factory: Any, db: Database
) -> None:
    """Switching HS256 -> EdDSA signs nobody out: SECRET_KEY tokens hold for one access-token
    lifetime after the first key started signing, never after."""
    user = await factory.user()
    hs_keyring = Keyring(algorithm="HS256", secret_key=SECRET)
    legacy, _ = issue_access_token(hs_keyring, user_id=user.id, account_id=user.account_id)
    assert await me_status(client, legacy) == 200
    await db.execute(
        "UPDATE signing_keys SET published_at = now() - interval '16 minutes',"
        " signing_from = now() - interval '16 minutes'"
    )
    app = client.server.app
    await eventually(lambda: not app[DOMAINS].identity.keyring.trusts(None))
    assert await me_status(client, legacy) == 401


async def test_a_changed_secret_key_gets_a_new_key_that_signs_at_once(
    db: Database, settings: Settings
) -> None:
    first = Keyring(algorithm="EdDSA", secret_key=settings.secret_key)
    await prepare(db, settings, first)
    old_kid = first.signing_key().kid  # type: ignore[union-attr]
    changed = settings.replaced(secret_key="a-new-secret-key-" + "y" * 40)
    second = Keyring(algorithm="EdDSA", secret_key=changed.secret_key)
    await prepare(db, changed, second)
    new_key = second.signing_key()
    assert new_key is not None and new_key.kid != old_kid
    states = {v.kid: v.state for v in await list_keys(db)}
    assert states == {old_kid: "retired", new_key.kid: "current"}
    assert second.trusts(old_kid)  # its tokens still verify until they expired
