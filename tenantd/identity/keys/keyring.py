"""The in-process copy of the access-token signing keys (table signing_keys, sql/0100).

Every instance signs with the key whose time has come and verifies by `kid` against the keys
that are published, so signing and verification are dictionary lookups and one PyJWT call.
The identity layer loads the rows (decrypting private keys) and hands them over with
`replace`; it reloads on every change (NOTIFY tenantd_keys), on a reconnect of the listener
and every RELOAD_SECONDS as a backstop. Since a new key is published at least one JWKS cache
lifetime before it signs, an instance that learns of it even a minute late still verifies
every token it meets, and key selection by time needs no write when a next key takes over.

`HS256` mode signs with SECRET_KEY and no `kid` (what tokens were before). In the asymmetric
modes such a token is trusted only until `hs256_until` (the first asymmetric key's start plus
one access-token lifetime), so switching to EdDSA signs nobody out and then closes for good.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jwt

HS256 = "HS256"
ASYMMETRIC = ("EdDSA", "ES256")
RELOAD_SECONDS = 60.0
MAX_HEADERS = 64  # distinct JWT header segments whose parse is kept


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str  # EdDSA | ES256
    jwk: dict[str, Any]  # public members only, with kid, alg and use
    public: Any  # a cryptography public key
    private: Any | None  # a cryptography private key; None once retired (or undecryptable)
    published_at: float
    signing_from: float
    retired_at: float | None
    not_after: float | None

    def state(self, now: float) -> str:
        if self.not_after is not None and self.not_after <= now:
            return "expired"
        if self.retired_at is not None and self.retired_at <= now:
            return "retired"
        if self.signing_from <= now:
            return "current"
        return "next"

    def published(self, now: float) -> bool:
        return self.published_at <= now and (self.not_after is None or now < self.not_after)


class UntrustedToken(Exception):
    """The token names no key this instance trusts, or its signature does not hold."""


class Keyring:
    def __init__(self, *, algorithm: str, secret_key: str, audience: str | None = None):
        self.algorithm = algorithm
        self.secret_key = secret_key
        self.audience = audience
        self.keys: dict[str, SigningKey] = {}
        self.hs256_until: float | None = None
        self.loaded = False
        self.reloads = 0
        self._headers: dict[str, dict[str, Any]] = {}

    def replace(self, keys: Iterable[SigningKey], *, hs256_until: float | None) -> None:
        """Swap in the keys just read from the database (one assignment: readers never see
        a half-built set)."""
        self.keys = {key.kid: key for key in keys}
        self.hs256_until = hs256_until
        self.loaded = True
        self.reloads += 1

    # signing ---------------------------------------------------------------
    def signing_key(self, now: float | None = None) -> SigningKey | None:
        """The current key with its private part: the latest that has started signing."""
        moment = time.time() if now is None else now
        best: SigningKey | None = None
        for key in self.keys.values():
            if key.private is None or key.state(moment) != "current":
                continue
            if best is None or key.signing_from > best.signing_from:
                best = key
        return best

    def sign(self, payload: dict[str, Any]) -> str:
        if self.audience is not None:
            payload = {**payload, "aud": self.audience}
        if self.algorithm == HS256:
            return jwt.encode(payload, self.secret_key, algorithm=HS256)
        key = self.signing_key()
        if key is None or key.private is None:
            raise RuntimeError("no signing key is loaded (the keyring hook has not run)")
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid})

    # verification ------------------------------------------------------------
    def trusts(self, kid: str | None, now: float | None = None) -> bool:
        """Whether tokens of `kid` (None: HS256 with SECRET_KEY) are accepted right now."""
        moment = time.time() if now is None else now
        if kid is None:
            return self.algorithm == HS256 or (
                self.hs256_until is not None and moment < self.hs256_until
            )
        key = self.keys.get(kid)
        return key is not None and key.published(moment)

    def decode(
        self, token: str, *, issuer: str, require: list[str]
    ) -> tuple[dict[str, Any], str | None]:
        """Verify the signature with the key the header names and the registered claims;
        the payload and the kid. The algorithm is the key's own (never the header's word):
        `none`, HS256 signed with a public key, or an unknown kid are refused."""
        header = self._header(token)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise UntrustedToken("kid is not a string")
        if not self.trusts(kid):
            raise UntrustedToken("untrusted key")
        if kid is None:
            verifier: Any = self.secret_key
            algorithm = HS256
        else:
            found = self.keys[kid]
            verifier, algorithm = found.public, found.alg
        try:
            payload = jwt.decode(
                token,
                verifier,
                algorithms=[algorithm],
                issuer=issuer,
                audience=self.audience,
                options={"require": require, "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise UntrustedToken(str(exc)) from None
        if self.audience is None and "aud" in payload:
            raise UntrustedToken("unexpected audience")
        return payload, kid

    def _header(self, token: str) -> dict[str, Any]:
        """The token's unverified header, only to pick the key (PyJWT checks it again while
        verifying). Every token of one key starts with the same header segment, so its
        parse is kept per segment: a cold token then costs one parse, not two (issue 19)."""
        segment = token.partition(".")[0]
        header = self._headers.get(segment)
        if header is not None:
            return header
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise UntrustedToken(str(exc)) from None
        if len(self._headers) >= MAX_HEADERS:
            self._headers.clear()  # a few keys make a few headers; anything else is noise
        self._headers[segment] = header
        return header

    # publication -------------------------------------------------------------
    def jwks(self, now: float | None = None) -> dict[str, Any]:
        """The public keys a verifier needs: next, current and retired until not_after."""
        moment = time.time() if now is None else now
        published = [key for key in self.keys.values() if key.published(moment)]
        published.sort(key=lambda key: key.signing_from, reverse=True)
        return {"keys": [dict(key.jwk) for key in published]}
