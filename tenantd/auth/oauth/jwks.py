"""Provider signing keys (JWKS), cached per jwks_uri, with key rotation.

An ID token whose `kid` is not in the cached set triggers one refetch; such forced refetches
are rate-limited per jwks_uri, so a stream of made-up key ids cannot hammer the provider.
Only RSA (RS256) and P-256 (ES256) signing keys are kept; symmetric keys never are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tenantd.auth.oauth.discovery import (
    DEFAULT_TIMEOUT,
    RETRY_STALE_SECONDS,
    ProviderDocuments,
    fetch_json,
)
from tenantd.auth.oauth.errors import ProviderError

log = logging.getLogger(__name__)

JWKS_TTL_SECONDS = 3600.0
REFETCH_INTERVAL_SECONDS = 30.0
MIN_RSA_BITS = 2048


def _algorithm_of(jwk: dict[str, Any]) -> str | None:
    if jwk.get("kty") == "RSA":
        return "RS256"
    if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
        return "ES256"
    return None


def parse_jwks(document: dict[str, Any]) -> dict[str | None, jwt.PyJWK]:
    """Usable signing keys by `kid`; anything else in the set is skipped."""
    keys: dict[str | None, jwt.PyJWK] = {}
    raw_keys = document.get("keys")
    if not isinstance(raw_keys, list):
        return keys
    for raw in raw_keys:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        algorithm = _algorithm_of(raw)
        if algorithm is None or raw.get("alg", algorithm) != algorithm:
            continue
        try:
            key = jwt.PyJWK(raw, algorithm=algorithm)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        if isinstance(key.key, rsa.RSAPublicKey) and key.key.key_size < MIN_RSA_BITS:
            continue
        if not hasattr(key.key, "verify"):  # a private key in a public set: refuse
            continue
        kid = raw.get("kid")
        keys[kid if isinstance(kid, str) else None] = key
    return keys


@dataclass
class _Entry:
    keys: dict[str | None, jwt.PyJWK]
    fetched_at: float
    forced_at: float = field(default=float("-inf"))

    def find(self, kid: str | None, algorithm: str) -> jwt.PyJWK | None:
        if kid is None:
            matching = [k for k in self.keys.values() if k.algorithm_name == algorithm]
            return matching[0] if len(matching) == 1 else None
        key = self.keys.get(kid)
        return key if key is not None and key.algorithm_name == algorithm else None


class JwksCache(ProviderDocuments[_Entry]):
    """Signing keys per jwks_uri for `ttl` seconds; unknown kids refetch at most once per
    `refetch_interval` seconds."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        ttl: float = JWKS_TTL_SECONDS,
        refetch_interval: float = REFETCH_INTERVAL_SECONDS,
        client_timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(http, ttl=ttl, client_timeout=client_timeout, clock=clock)
        self.refetch_interval = refetch_interval

    async def key(self, jwks_uri: str, *, kid: str | None, algorithm: str) -> jwt.PyJWK | None:
        """The key that signed a token, or None when the provider does not publish it."""
        entry = self._entries.get(jwks_uri)
        if entry is not None and self.clock() - entry.fetched_at < self.ttl:
            key = entry.find(kid, algorithm)
            if key is not None:
                return key
        async with self._lock(jwks_uri):
            current = self._entries.get(jwks_uri)
            now = self.clock()
            fresh = current is not None and now - current.fetched_at < self.ttl
            if current is not None and fresh and current is not entry:
                return current.find(kid, algorithm)  # refreshed while we waited
            if current is None or not fresh:
                stale = current
                try:
                    current = await self._fetch(jwks_uri, forced_at=None)
                except ProviderError:
                    key = stale.find(kid, algorithm) if stale is not None else None
                    if stale is None or key is None:
                        raise
                    # Keep verifying with the last good set while the provider hiccups.
                    log.warning("oauth key set refresh failed; using the cached set")
                    stale.fetched_at = now - self.ttl + RETRY_STALE_SECONDS
                    return key
                return current.find(kid, algorithm)
            # A fresh set without this kid: the provider may have rotated its keys.
            if now - current.forced_at < self.refetch_interval:
                log.warning("oauth signing key unknown; refetch rate-limited", extra={"kid": kid})
                return None
            log.info("oauth signing key unknown; refetching the key set", extra={"kid": kid})
            current = await self._fetch(jwks_uri, forced_at=now)
            return current.find(kid, algorithm)

    async def _fetch(self, jwks_uri: str, *, forced_at: float | None) -> _Entry:
        """Fetch the set; `forced_at` marks an unknown-kid refetch (None: cold or TTL)."""
        self.fetches += 1
        document = await fetch_json(self.http, jwks_uri, client_timeout=self.client_timeout)
        previous = self._entries.get(jwks_uri)
        if forced_at is None:
            # A TTL refresh keeps the rate-limit clock of the previous set.
            forced_at = previous.forced_at if previous is not None else float("-inf")
        entry = _Entry(keys=parse_jwks(document), fetched_at=self.clock(), forced_at=forced_at)
        self._entries[jwks_uri] = entry
        return entry
