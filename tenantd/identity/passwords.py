"""argon2id password hashing (argon2-cffi), with a dummy verify for unknown emails."""

from __future__ import annotations

import asyncio
from functools import lru_cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_LENGTH = 8
MAX_LENGTH = 256  # argon2 accepts more, but hashing megabytes is a denial-of-service vector


@lru_cache(maxsize=1)
def hasher() -> PasswordHasher:
    return PasswordHasher()  # argon2id with the library's RFC 9106 low-memory profile


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return hasher().hash("tenantd-dummy-password")


async def hash_password(password: str) -> str:
    # argon2 takes tens of milliseconds of CPU: keep it off the event loop.
    return await asyncio.to_thread(hasher().hash, password)


def _verify(password_hash: str | None, password: str) -> bool:
    try:
        return hasher().verify(password_hash or _dummy_hash(), password) and bool(password_hash)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


async def verify_password(password_hash: str | None, password: str) -> bool:
    """Check a password; with no hash, verify against a dummy so timing reveals nothing."""
    return await asyncio.to_thread(_verify, password_hash, password)


def needs_rehash(password_hash: str) -> bool:
    return hasher().check_needs_rehash(password_hash)
