"""Password hashes of other products, verified in their own scheme against published vectors,
and replaced by argon2id at the first successful sign-in."""

from __future__ import annotations

import base64
from typing import Any

import bcrypt
import pytest
from argon2 import PasswordHasher, Type

from tenantd.identity import passwords
from tenantd.identity import queries as identity_queries
from tenantd.identity.passwords import (
    FirebaseScrypt,
    UnsupportedHash,
    check_hash,
    needs_rehash,
    verify_password,
)
from tests.factories import Factory

# github.com/firebase/scrypt README: the project's parameters, one exported user.
FIREBASE = FirebaseScrypt(
    signer_key=base64.b64decode(
        "jxspr8Ki0RYycVU8zykbdLGjFQ3McFUH0uiiTvC8pVMXAn210wjLNmdZJzxUECKbm0QsEmYUSDzZvpjeJ9WmXA=="
    ),
    salt_separator=base64.b64decode("Bw=="),
    rounds=8,
    mem_cost=14,
)
FIREBASE_SALT = base64.b64decode("42xEC+ixf3L2lw==")
FIREBASE_HASH = base64.b64decode(
    "lSrfV15cpx95/sZS2W9c9Kp6i/LVgQNDNC/qzrCnh1SAyZvqmZqAjTdn3aoItz+VHjoZilo78198JAdRuid5lQ=="
)
FIREBASE_STORED = FIREBASE.encode(salt=FIREBASE_SALT, password_hash=FIREBASE_HASH)
# PHP's manual, password_verify(): a $2y$ hash of "rasmuslerdorf".
PHP_BCRYPT = "$2y$10$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a"
# Django's test suite (auth_tests.test_hashers): make_password("lètmein", "seasalt").
DJANGO = "pbkdf2_sha256$1000000$seasalt$r1uLUxoxpP2Ued/qxvmje7UH9PUJBkRrvf9gGPL7Cps="


def test_firebase_scrypt_reproduces_the_published_vector() -> None:
    assert FIREBASE.derive("user1password", FIREBASE_SALT) == FIREBASE_HASH


@pytest.mark.parametrize(
    ("stored", "password"),
    [
        (FIREBASE_STORED, "user1password"),
        (PHP_BCRYPT, "rasmuslerdorf"),
        ("$2b$" + PHP_BCRYPT[4:], "rasmuslerdorf"),
        ("$2a$" + PHP_BCRYPT[4:], "rasmuslerdorf"),
        (DJANGO, "lètmein"),
    ],
    ids=["scrypt-firebase", "bcrypt-2y", "bcrypt-2b", "bcrypt-2a", "django-pbkdf2"],
)
async def test_foreign_hashes_verify_in_their_scheme(stored: str, password: str) -> None:
    check_hash(stored)
    assert await verify_password(stored, password)
    assert not await verify_password(stored, password + "x")
    assert not await verify_password(stored, password.upper())
    assert needs_rehash(stored)


async def test_argon2_of_other_types_and_costs_verifies_and_is_rehashed() -> None:
    for kind in (Type.I, Type.D, Type.ID):
        stored = PasswordHasher(time_cost=1, memory_cost=8192, type=kind).hash("s3cret-pass")
        assert check_hash(stored) == "argon2"
        assert await verify_password(stored, "s3cret-pass")
        assert not await verify_password(stored, "s3cret-pasS")
        assert needs_rehash(stored)
    assert not needs_rehash(await passwords.hash_password("s3cret-pass"))


async def test_bcrypt_reads_only_the_first_72_bytes_like_the_exporter() -> None:
    long = "p" * 80
    stored = bcrypt.hashpw(long.encode()[:72], bcrypt.gensalt(4)).decode()
    assert await verify_password(stored, long)
    assert await verify_password(stored, "p" * 72 + "anything")
    assert not await verify_password(stored, "p" * 71)


@pytest.mark.parametrize(
    "hostile",
    [
        "md5$abc",
        "5f4dcc3b5aa765d61d8327deb882cf99",
        "$2b$10$short",
        "pbkdf2_sha256$999999999$salt$aGFzaA==",  # a billion rounds per sign-in
        "pbkdf2_sha256$1000$$aGFzaA==",
        "pbkdf2_sha256$x$salt$aGFzaA==",
        FIREBASE_STORED.replace("m=14", "m=30"),  # 2**30 memory cost
        FIREBASE_STORED.replace("r=8", "r=0"),
        "scrypt-firebase$r=8,m=14$c2FsdA==$aGFzaA==",  # no signer key
        "$argon2id$v=19$m=65536,t=3,p=4$bad",
    ],
)
async def test_unverifiable_or_costly_hashes_are_refused(hostile: str) -> None:
    with pytest.raises(UnsupportedHash):
        check_hash(hostile)
    assert not await verify_password(hostile, "anything")


async def sign_in(client: Any, email: str, password: str) -> int:
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    return int(response.status)


@pytest.mark.parametrize(
    ("stored", "password"),
    [(FIREBASE_STORED, "user1password"), (PHP_BCRYPT, "rasmuslerdorf"), (DJANGO, "lètmein")],
    ids=["scrypt-firebase", "bcrypt", "django-pbkdf2"],
)
async def test_first_sign_in_rehashes_to_argon2id(
    client: Any, factory: Factory, db: Any, stored: str, password: str
) -> None:
    user = await factory.user(password=None)
    await db.execute(
        "INSERT INTO user_passwords (user_id, password_hash) VALUES (%(u)s, %(h)s)",
        {"u": user.id, "h": stored},
    )
    assert await sign_in(client, user.email, password + "!") == 401
    kept = await db.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user.id}
    )
    assert kept == stored  # a wrong password changes nothing
    assert await sign_in(client, user.email, password) == 200
    rehashed = await db.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user.id}
    )
    assert rehashed.startswith("$argon2id$") and not needs_rehash(rehashed)
    assert await sign_in(client, user.email, password) == 200


async def test_step_up_with_an_imported_password_rehashes_it(
    client: Any, factory: Factory, db: Any
) -> None:
    user = await factory.user()
    assert await sign_in(client, user.email, user.password) == 200
    await db.execute(
        "UPDATE user_passwords SET password_hash = %(h)s WHERE user_id = %(u)s",
        {"u": user.id, "h": PHP_BCRYPT},
    )
    refused = await client.post("/api/v1/auth/reauth", json={"password": "rasmuslerdorF"})
    assert refused.status == 401
    response = await client.post("/api/v1/auth/reauth", json={"password": "rasmuslerdorf"})
    assert response.status == 200, await response.text()
    stored = await db.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user.id}
    )
    assert stored.startswith("$argon2id$")


async def test_a_rehash_never_overwrites_a_password_changed_meanwhile(
    factory: Factory, db: Any
) -> None:
    user = await factory.user(password=None)
    await db.execute(
        "INSERT INTO user_passwords (user_id, password_hash) VALUES (%(u)s, %(h)s)",
        {"u": user.id, "h": PHP_BCRYPT},
    )
    matches, rehashed = await passwords.verified_rehash(PHP_BCRYPT, "rasmuslerdorf")
    assert matches and rehashed is not None
    changed = await passwords.hash_password("a new password chosen meanwhile")
    await db.execute(
        "UPDATE user_passwords SET password_hash = %(h)s WHERE user_id = %(u)s",
        {"u": user.id, "h": changed},
    )
    async with db.transaction() as conn:
        assert not await identity_queries.replace_password_hash(
            conn, user_id=user.id, old=PHP_BCRYPT, new=rehashed
        )
    stored = await db.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user.id}
    )
    assert stored == changed
