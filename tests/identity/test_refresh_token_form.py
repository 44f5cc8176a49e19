"""Refresh tokens keep their form: `<family>.<tag>.<secret>`, tag and successor secret keyed
HMAC-SHA256 (tokens already handed out must stay recognisable and renewable)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

from tenantd.identity.tokens import refresh_token_family, successor_refresh_token

SECRET = "a-secret-key-for-the-form-test-0123456789"


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_successor_is_the_family_part_and_the_keyed_hash_of_its_predecessor() -> None:
    family = uuid.UUID("00000000-0000-4000-a000-000000000001")
    token = "predecessor-token"
    tag = hmac.new(SECRET.encode(), b"tenantd:refresh-family:" + family.bytes, hashlib.sha256)
    secret = hmac.new(SECRET.encode(), b"tenantd:refresh-successor:" + token.encode(), "sha256")
    expected = f"{b64(family.bytes)}.{b64(tag.digest()[:16])}.{b64(secret.digest())}"
    successor = successor_refresh_token(SECRET, token, family)
    assert successor == expected
    assert refresh_token_family(SECRET, successor) == family
    assert refresh_token_family("another-key", successor) is None
