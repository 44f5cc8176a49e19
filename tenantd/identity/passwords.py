"""argon2id password hashing (argon2-cffi), with a dummy verify for unknown emails.

Hashes imported from other products (`tenantd users import`) are verified in their own
scheme: bcrypt (`$2a$`/`$2b$`/`$2y$`), argon2 of any type and cost (PHC string), Firebase's
modified scrypt (`scrypt-firebase$...`, see `firebase_scrypt`) and Django's
`pbkdf2_sha256$iterations$salt$hash`. `needs_rehash` is true for every one of them, so the
first successful sign-in replaces it with tenantd's argon2id.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from functools import lru_cache

import bcrypt
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MIN_LENGTH = 8
MAX_LENGTH = 256  # argon2 accepts more, but hashing megabytes is a denial-of-service vector

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
ARGON2_PREFIXES = ("$argon2id$", "$argon2i$", "$argon2d$")
DJANGO_PBKDF2 = "pbkdf2_sha256"
FIREBASE_SCRYPT = "scrypt-firebase"
# Bounds on what an imported hash may make us compute (a hostile import file must not turn
# one sign-in into minutes of CPU or gigabytes of memory).
MAX_PBKDF2_ITERATIONS = 5_000_000
MAX_SCRYPT_MEM_COST = 17  # N = 2**17
MAX_SCRYPT_ROUNDS = 16


class UnsupportedHash(ValueError):
    """A password hash tenantd cannot verify (unknown scheme or malformed)."""


@lru_cache(maxsize=1)
def hasher() -> PasswordHasher:
    return PasswordHasher()  # argon2id with the library's RFC 9106 low-memory profile


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return hasher().hash("tenantd-dummy-password")


async def hash_password(password: str) -> str:
    # argon2 takes tens of milliseconds of CPU: keep it off the event loop.
    return await asyncio.to_thread(hasher().hash, password)


@dataclass(frozen=True)
class FirebaseScrypt:
    """Firebase Authentication's modified scrypt: the project's parameters with one user's
    salt. hash = AES-256-CTR(key = scrypt(password, salt + salt_separator, N = 2**mem_cost,
    r = rounds, p = 1)[:32], iv = 16 zero bytes) applied to the signer key
    (github.com/firebase/scrypt)."""

    signer_key: bytes
    salt_separator: bytes
    rounds: int
    mem_cost: int

    def derive(self, password: str, salt: bytes) -> bytes:
        key = hashlib.scrypt(
            password.encode(),
            salt=salt + self.salt_separator,
            n=2**self.mem_cost,
            r=self.rounds,
            p=1,
            dklen=32,
            maxmem=256 * 1024 * 1024,
        )
        encryptor = Cipher(algorithms.AES(key), modes.CTR(b"\0" * 16)).encryptor()
        return encryptor.update(self.signer_key) + encryptor.finalize()

    def encode(self, *, salt: bytes, password_hash: bytes) -> str:
        """The self-contained string tenantd stores:
        `scrypt-firebase$r=<rounds>,m=<mem cost>,ss=<b64 separator>,sk=<b64 signer key>$<b64
        salt>$<b64 hash>`."""
        params = (
            f"r={self.rounds},m={self.mem_cost},ss={_b64(self.salt_separator)},"
            f"sk={_b64(self.signer_key)}"
        )
        return f"{FIREBASE_SCRYPT}${params}${_b64(salt)}${_b64(password_hash)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(value: str) -> bytes:
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise UnsupportedHash("not base64") from None


def parse_firebase_scrypt(stored: str) -> tuple[FirebaseScrypt, bytes, bytes]:
    """The parameters, salt and hash of a `scrypt-firebase$...` string."""
    try:
        scheme, params, salt, digest = stored.split("$")
        fields = dict(part.split("=", 1) for part in params.split(","))
        config = FirebaseScrypt(
            signer_key=_unb64(fields["sk"]),
            salt_separator=_unb64(fields["ss"]),
            rounds=int(fields["r"]),
            mem_cost=int(fields["m"]),
        )
    except (ValueError, KeyError):
        raise UnsupportedHash("malformed scrypt-firebase hash") from None
    if scheme != FIREBASE_SCRYPT or not config.signer_key:
        raise UnsupportedHash("malformed scrypt-firebase hash")
    if not (
        1 <= config.rounds <= MAX_SCRYPT_ROUNDS and 1 <= config.mem_cost <= MAX_SCRYPT_MEM_COST
    ):
        raise UnsupportedHash("scrypt-firebase cost out of bounds")
    return config, _unb64(salt), _unb64(digest)


def _django_parts(stored: str) -> tuple[int, str, bytes]:
    try:
        scheme, iterations, salt, digest = stored.split("$")
        count = int(iterations)
    except ValueError:
        raise UnsupportedHash("malformed pbkdf2_sha256 hash") from None
    if scheme != DJANGO_PBKDF2 or not salt or not 1 <= count <= MAX_PBKDF2_ITERATIONS:
        raise UnsupportedHash("malformed pbkdf2_sha256 hash")
    return count, salt, _unb64(digest)


def check_hash(stored: str) -> str:
    """The scheme of a hash tenantd can verify (argon2, bcrypt, scrypt-firebase,
    pbkdf2_sha256); anything else raises UnsupportedHash. Used on import."""
    if stored.startswith(ARGON2_PREFIXES):
        try:
            hasher().check_needs_rehash(stored)
        except (InvalidHashError, ValueError):
            raise UnsupportedHash("malformed argon2 hash") from None
        return "argon2"
    if stored.startswith(BCRYPT_PREFIXES):
        if len(stored) != 60:
            raise UnsupportedHash("malformed bcrypt hash")
        return "bcrypt"
    if stored.startswith(FIREBASE_SCRYPT + "$"):
        parse_firebase_scrypt(stored)
        return FIREBASE_SCRYPT
    if stored.startswith(DJANGO_PBKDF2 + "$"):
        _django_parts(stored)
        return DJANGO_PBKDF2
    raise UnsupportedHash("unknown password hash scheme")


def _verify_foreign(stored: str, password: str) -> bool:
    if stored.startswith(BCRYPT_PREFIXES):
        # bcrypt reads at most 72 bytes (the exporting product truncated the same way); the
        # library refuses longer input rather than truncating.
        secret = password.encode()[:72]
        candidate = stored.encode()
        if stored.startswith("$2y$"):  # PHP's name for the same algorithm as $2b$
            candidate = b"$2b$" + candidate[4:]
        try:
            return bcrypt.checkpw(secret, candidate)
        except ValueError:
            return False
    if stored.startswith(FIREBASE_SCRYPT + "$"):
        config, salt, digest = parse_firebase_scrypt(stored)
        return hmac.compare_digest(config.derive(password, salt), digest)
    if stored.startswith(DJANGO_PBKDF2 + "$"):
        iterations, text_salt, expected = _django_parts(stored)
        computed = hashlib.pbkdf2_hmac("sha256", password.encode(), text_salt.encode(), iterations)
        return hmac.compare_digest(computed, expected)
    raise UnsupportedHash("unknown password hash scheme")


def _verify(password_hash: str | None, password: str) -> bool:
    if password_hash and not password_hash.startswith(ARGON2_PREFIXES):
        try:
            return _verify_foreign(password_hash, password)
        except UnsupportedHash:
            return False
    try:
        return hasher().verify(password_hash or _dummy_hash(), password) and bool(password_hash)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


async def verify_password(password_hash: str | None, password: str) -> bool:
    """Check a password in its hash's scheme; with no hash, verify against a dummy so timing
    reveals nothing."""
    return await asyncio.to_thread(_verify, password_hash, password)


def needs_rehash(password_hash: str) -> bool:
    """True for an imported hash of any other scheme, and for argon2 of other parameters."""
    if not password_hash.startswith(ARGON2_PREFIXES):
        return True
    try:
        return hasher().check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError):
        return True


async def verified_rehash(password_hash: str | None, password: str) -> tuple[bool, str | None]:
    """The password verification action: (matches, the argon2id hash to store instead when
    the stored one is imported or outdated). Every sign-in path calls this."""
    matches = await verify_password(password_hash, password)
    if not matches or not password_hash or not needs_rehash(password_hash):
        return matches, None
    return True, await hash_password(password)
