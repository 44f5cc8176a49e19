"""A software WebAuthn authenticator (ES256, "none" attestation) for tests that need a passkey
without a browser: it answers the server's creation and request options with the JSON a
browser would post, built from the WebAuthn spec's byte layouts (authenticator data,
attested credential data, COSE key) and signed with a real P-256 key."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

FLAG_UP, FLAG_UV, FLAG_AT = 0x01, 0x04, 0x40


@dataclass
class SoftAuthenticator:
    rp_id: str
    origin: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: os.urandom(32))
    user_handle: bytes = b""
    sign_count: int = 0

    def _client_data(self, kind: str, challenge: str) -> bytes:
        return json.dumps(
            {"type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": False}
        ).encode()

    def _cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {
                1: 2,  # kty: EC2
                3: -7,  # alg: ES256
                -1: 1,  # crv: P-256
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )

    def _auth_data(self, flags: int, attested: bytes = b"") -> bytes:
        rp_hash = hashlib.sha256(self.rp_id.encode()).digest()
        return rp_hash + bytes([flags]) + struct.pack(">I", self.sign_count) + attested

    def create(self, options: dict[str, Any]) -> dict[str, Any]:
        """The registration response to PublicKeyCredentialCreationOptions (as JSON)."""
        self.user_handle = base64url_to_bytes(options["user"]["id"])
        client_data = self._client_data("webauthn.create", options["challenge"])
        attested = (
            bytes(16)  # AAGUID: none
            + struct.pack(">H", len(self.credential_id))
            + self.credential_id
            + self._cose_key()
        )
        auth_data = self._auth_data(FLAG_UP | FLAG_UV | FLAG_AT, attested)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        raw = bytes_to_base64url(self.credential_id)
        return {
            "id": raw,
            "rawId": raw,
            "type": "public-key",
            "response": {
                "clientDataJSON": bytes_to_base64url(client_data),
                "attestationObject": bytes_to_base64url(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
        }

    def get(self, options: dict[str, Any], *, tamper: bool = False) -> dict[str, Any]:
        """The assertion for PublicKeyCredentialRequestOptions (as JSON); `tamper` signs
        other bytes, so the server must refuse it."""
        self.sign_count += 1
        client_data = self._client_data("webauthn.get", options["challenge"])
        auth_data = self._auth_data(FLAG_UP | FLAG_UV)
        signed = auth_data + hashlib.sha256(client_data).digest()
        if tamper:
            signed = b"not" + signed
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        raw = bytes_to_base64url(self.credential_id)
        return {
            "id": raw,
            "rawId": raw,
            "type": "public-key",
            "response": {
                "clientDataJSON": bytes_to_base64url(client_data),
                "authenticatorData": bytes_to_base64url(auth_data),
                "signature": bytes_to_base64url(signature),
                "userHandle": bytes_to_base64url(self.user_handle),
            },
            "clientExtensionResults": {},
        }
