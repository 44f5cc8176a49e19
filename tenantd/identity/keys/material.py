"""Key material with `cryptography` and PyJWT only: generation, the public JWK, and the
private key encrypted at rest (AES-256-GCM under a key HKDF derives from SECRET_KEY, with the
kid as associated data so a ciphertext cannot be moved to another row)."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

_INFO = b"tenantd signing keys v1"
_NONCE_BYTES = 12


@dataclass(frozen=True)
class NewKey:
    kid: str
    alg: str
    public_jwk: dict[str, Any]
    encrypted_private: bytes


def _wrapping_key(secret_key: str) -> AESGCM:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        secret_key.encode()
    )
    return AESGCM(derived)


def new_kid() -> str:
    """Readable and unique: the creation date and 48 random bits."""
    return f"{dt.datetime.now(dt.UTC):%Y%m%d}-{secrets.token_hex(6)}"


def generate(alg: str, secret_key: str) -> NewKey:
    """A fresh key pair for `alg` (EdDSA: Ed25519, ES256: P-256)."""
    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
    if alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        raise ValueError(f"no key pairs for {alg}")
    kid = new_kid()
    public = {**jwk, "kid": kid, "alg": alg, "use": "sig"}
    der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return NewKey(kid, alg, public, encrypt(secret_key, kid, der))


def encrypt(secret_key: str, kid: str, plaintext: bytes) -> bytes:
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + _wrapping_key(secret_key).encrypt(nonce, plaintext, kid.encode())


def decrypt_private(secret_key: str, kid: str, stored: bytes) -> Any | None:
    """The private key object, or None when SECRET_KEY is not the one it was sealed with."""
    nonce, sealed = stored[:_NONCE_BYTES], stored[_NONCE_BYTES:]
    try:
        der = _wrapping_key(secret_key).decrypt(nonce, sealed, kid.encode())
    except InvalidTag:
        return None
    return serialization.load_der_private_key(der, password=None)


def public_key(alg: str, jwk: dict[str, Any]) -> Any:
    """The cryptography public key of a stored JWK."""
    if alg == "EdDSA":
        return OKPAlgorithm.from_jwk(jwk)
    return ECAlgorithm.from_jwk(jwk)


PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
