"""OpenID Provider metadata from `{issuer}/.well-known/openid-configuration`, cached per issuer.

Every URL the provider hands us must be https; plain http is allowed only for loopback hosts
(local fakes in tests and development).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import aiohttp
import orjson

from tenantd.auth.oauth.errors import ProviderError

log = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 512 * 1024
DISCOVERY_TTL_SECONDS = 3600.0
RETRY_STALE_SECONDS = 60.0  # after a failed refresh, keep using the stale copy this long
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_safe_url(url: str, *, what: str) -> str:
    """https, or http to a loopback host; no credentials or fragment in the URL."""
    if not isinstance(url, str) or not url:
        raise ProviderError(f"{what} is missing")
    parts = urlsplit(url)
    if parts.username or parts.password or parts.fragment or not parts.hostname:
        raise ProviderError(f"{what} is not a usable URL")
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and is_loopback(parts.hostname):
        return url
    raise ProviderError(f"{what} must use https")


async def fetch_json(
    http: aiohttp.ClientSession,
    url: str,
    *,
    client_timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """GET a JSON object (no redirects, size-capped); any failure is a ProviderError."""
    try:
        async with http.get(
            url,
            timeout=client_timeout,
            allow_redirects=False,
            headers={"Accept": "application/json"},
        ) as response:
            if response.status != 200:
                raise ProviderError(f"GET {url} answered {response.status}")
            body = await read_capped(response)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ProviderError(f"GET {url} failed: {type(exc).__name__}") from None
    return parse_object(body, what=url)


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    if response.content_length is not None and response.content_length > limit:
        raise ProviderError("provider answer is too large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise ProviderError("provider answer is too large")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_object(body: bytes, *, what: str) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProviderError(f"{what}: not JSON") from None
    if not isinstance(data, dict):
        raise ProviderError(f"{what}: not a JSON object")
    return data


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str  # exactly as published: ID tokens must carry this `iss`
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    token_auth_method: str  # client_secret_basic or client_secret_post
    iss_parameter_supported: bool = False  # RFC 9207: callback carries `iss`
    userinfo_endpoint: str | None = None  # OIDC Core 5.3; None: the provider has none


def _same_issuer(published: str, configured: str) -> bool:
    return published.rstrip("/") == configured.rstrip("/")


def parse_metadata(
    document: dict[str, Any],
    *,
    configured_issuer: str,
    accept: Callable[[str], bool] | None = None,
) -> ProviderMetadata:
    """Validate a discovery document against the configured issuer (or `accept`: a preset
    whose document names a templated issuer, Microsoft's `{tenantid}`)."""
    issuer = document.get("issuer")
    same = _same_issuer if accept is None else (lambda published, _configured: accept(published))
    if not isinstance(issuer, str) or not same(issuer, configured_issuer):
        raise ProviderError("discovery document names a different issuer")
    require_safe_url(issuer, what="issuer")
    methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    if not isinstance(methods, list):
        raise ProviderError("token_endpoint_auth_methods_supported is not a list")
    if "client_secret_basic" in methods:
        auth_method = "client_secret_basic"
    elif "client_secret_post" in methods:
        auth_method = "client_secret_post"
    else:
        raise ProviderError("provider supports neither client_secret_basic nor client_secret_post")
    userinfo = document.get("userinfo_endpoint")
    challenge_methods = document.get("code_challenge_methods_supported")
    if isinstance(challenge_methods, list) and "S256" not in challenge_methods:
        raise ProviderError("provider does not support PKCE S256")
    return ProviderMetadata(
        issuer=issuer,
        authorization_endpoint=require_safe_url(
            document.get("authorization_endpoint", ""), what="authorization_endpoint"
        ),
        token_endpoint=require_safe_url(document.get("token_endpoint", ""), what="token_endpoint"),
        jwks_uri=require_safe_url(document.get("jwks_uri", ""), what="jwks_uri"),
        token_auth_method=auth_method,
        iss_parameter_supported=document.get("authorization_response_iss_parameter_supported")
        is True,
        # Access tokens go there: the same https rule as every other endpoint.
        userinfo_endpoint=require_safe_url(userinfo, what="userinfo_endpoint")
        if userinfo is not None
        else None,
    )


EntryT = TypeVar("EntryT")


class ProviderDocuments(Generic[EntryT]):
    """What the provider caches share: per URL an entry kept `ttl` seconds, and a lock so
    that concurrent misses share one fetch (`fetches` counts them)."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        ttl: float,
        client_timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.http = http
        self.ttl = ttl
        self.client_timeout = client_timeout
        self.clock = clock
        self.fetches = 0
        self._entries: dict[str, EntryT] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, url: str) -> asyncio.Lock:
        return self._locks.setdefault(url, asyncio.Lock())


@dataclass
class _Entry:
    metadata: ProviderMetadata
    expires: float


class DiscoveryCache(ProviderDocuments[_Entry]):
    """Metadata per issuer for `ttl` seconds; concurrent misses share one fetch."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        ttl: float = DISCOVERY_TTL_SECONDS,
        client_timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(http, ttl=ttl, client_timeout=client_timeout, clock=clock)

    async def get(
        self, issuer: str, *, accept: Callable[[str], bool] | None = None
    ) -> ProviderMetadata:
        entry = self._entries.get(issuer)
        if entry is not None and self.clock() < entry.expires:
            return entry.metadata
        async with self._lock(issuer):
            entry = self._entries.get(issuer)
            if entry is not None and self.clock() < entry.expires:
                return entry.metadata
            try:
                metadata = await self._fetch(issuer, accept)
            except ProviderError as exc:
                if entry is None:
                    raise
                # Keep signing people in with the last good copy while the provider hiccups.
                log.warning("oauth discovery refresh failed; using cached copy: %s", exc)
                entry.expires = self.clock() + RETRY_STALE_SECONDS
                return entry.metadata
            self._entries[issuer] = _Entry(metadata, self.clock() + self.ttl)
            return metadata

    async def _fetch(
        self, issuer: str, accept: Callable[[str], bool] | None = None
    ) -> ProviderMetadata:
        base = require_safe_url(issuer, what="issuer")
        self.fetches += 1
        url = base.rstrip("/") + "/.well-known/openid-configuration"
        document = await fetch_json(self.http, url, client_timeout=self.client_timeout)
        return parse_metadata(document, configured_issuer=issuer, accept=accept)
