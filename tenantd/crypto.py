"""Secrets at rest: AES-256-GCM under a key derived from SECRET_KEY (HKDF-SHA256).

Each purpose derives its own key (a distinct HKDF `info` label, named by the package that
seals: TOTP secrets in tenantd/mfa/totp.py, endpoint secrets in tenantd/webhooks/sealing.py),
so a ciphertext of one purpose never opens under another. The associated data binds a
ciphertext to its row (the user id), so a secret copied onto another user's row does not
decrypt.
"""

from __future__ import annotations

import os
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NONCE_BYTES = 12


class UndecryptableSecret(Exception):
    """The stored secret does not open with this SECRET_KEY (rotated key, or tampering)."""


@lru_cache(maxsize=16)
def derived_key(secret_key: str, info: bytes) -> bytes:
    """A 256-bit key for one purpose, derived from SECRET_KEY."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(
        secret_key.encode()
    )


def seal(secret_key: str, info: bytes, plaintext: bytes, *, associated: bytes) -> bytes:
    """nonce || AES-GCM ciphertext (with tag)."""
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(derived_key(secret_key, info)).encrypt(nonce, plaintext, associated)
    return nonce + sealed


def unseal(secret_key: str, info: bytes, blob: bytes, *, associated: bytes) -> bytes:
    blob = bytes(blob)
    nonce, sealed = blob[:NONCE_BYTES], blob[NONCE_BYTES:]
    try:
        return AESGCM(derived_key(secret_key, info)).decrypt(nonce, sealed, associated)
    except InvalidTag:
        raise UndecryptableSecret("secret does not decrypt with this key") from None
