"""HTTP side of the code flow: metadata, signing keys, the token request and UserInfo.

The composition root builds one OidcClient on the services' shared aiohttp session, so its
discovery and JWKS caches live as long as the process.
"""

from __future__ import annotations

import base64
import logging
import re
from typing import Any
from urllib.parse import quote

import aiohttp
import jwt
import orjson
from authlib.oauth2.rfc6749.parameters import prepare_token_request

from tenantd.auth.oauth import presets
from tenantd.auth.oauth.discovery import (
    DEFAULT_TIMEOUT,
    DiscoveryCache,
    ProviderMetadata,
    parse_object,
    read_capped,
)
from tenantd.auth.oauth.errors import PROVIDER_ERROR_CODE, ProviderError, TokenRefused
from tenantd.auth.oauth.flow import TokenAnswer
from tenantd.auth.oauth.jwks import JwksCache
from tenantd.identity.settings import OAuthProviderSettings

log = logging.getLogger(__name__)

_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750 b64token
MAX_ACCESS_TOKEN = 16 * 1024


class OidcClient:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        discovery: DiscoveryCache | None = None,
        jwks: JwksCache | None = None,
        client_timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    ):
        self.http = http
        self.discovery = discovery or DiscoveryCache(http, client_timeout=client_timeout)
        self.jwks = jwks or JwksCache(http, client_timeout=client_timeout)
        self.client_timeout = client_timeout

    async def metadata(self, provider: OAuthProviderSettings) -> ProviderMetadata:
        if not presets.is_openid(provider):
            return presets.github_metadata(provider)
        issuer = presets.discovery_issuer(provider)
        return await self.discovery.get(
            issuer, accept=lambda published: presets.accepts_issuer(provider, published, issuer)
        )

    async def signing_key(
        self, metadata: ProviderMetadata, *, kid: str | None, algorithm: str
    ) -> jwt.PyJWK | None:
        return await self.jwks.key(metadata.jwks_uri, kid=kid, algorithm=algorithm)

    async def exchange_code(
        self,
        provider: OAuthProviderSettings,
        metadata: ProviderMetadata,
        *,
        code: str,
        code_verifier: str,
        redirect_uri: str,
    ) -> TokenAnswer:
        """POST the code to the token endpoint; return the ID token (and access token)."""
        secret = presets.client_secret(provider, metadata)
        extra: dict[str, str] = {"code_verifier": code_verifier, "client_id": provider.client_id}
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        if token_auth_method(provider, metadata) == "client_secret_basic":
            # RFC 6749 2.3.1: form-encode id and secret before base64.
            pair = f"{quote(provider.client_id, safe='')}:{quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            extra["client_secret"] = secret
        body_out = prepare_token_request(
            "authorization_code", code=code, redirect_uri=redirect_uri, **extra
        )
        status, body = await self._request(
            "POST", metadata.token_endpoint, "token", data=body_out, headers=headers
        )
        data = parse_object(body, what="token answer") if status == 200 else {}
        if status != 200 or "error" in data:
            # GitHub answers a refused code with 200 and an `error` member.
            raise TokenRefused(f"token endpoint answered {status} {_error_code(body)}")
        return token_answer(data, id_token=presets.is_openid(provider))

    async def _request(self, method: str, url: str, what: str, **kw: Any) -> tuple[int, bytes]:
        """One request to the provider: no redirects, a bounded body, transport errors named."""
        try:
            async with self.http.request(
                method, url, timeout=self.client_timeout, allow_redirects=False, **kw
            ) as response:
                return response.status, await read_capped(response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ProviderError(f"{what} request failed: {type(exc).__name__}") from None

    async def userinfo(self, metadata: ProviderMetadata, *, access_token: str) -> dict[str, Any]:
        """GET the UserInfo claims with the access token as Bearer (OIDC Core 5.3.1)."""
        if metadata.userinfo_endpoint is None:
            raise ProviderError("provider publishes no userinfo_endpoint")
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        status, body = await self._request(
            "GET", metadata.userinfo_endpoint, "userinfo", headers=headers
        )
        if status != 200:
            raise ProviderError(f"userinfo endpoint answered {status}")
        return parse_object(body, what="userinfo answer")

    async def github_user(
        self, metadata: ProviderMetadata, *, access_token: str
    ) -> tuple[dict[str, Any], list[Any]]:
        """GitHub's `GET /user` and `GET /user/emails` (REST API v3, Bearer token)."""
        assert metadata.userinfo_endpoint is not None
        headers = {
            "Authorization": f"Bearer {access_token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "tenantd",  # the GitHub API refuses requests without one
        }
        found: list[Any] = []
        for url in (metadata.userinfo_endpoint, metadata.userinfo_endpoint + "/emails"):
            status, body = await self._request("GET", url, "github user", headers=headers)
            if status != 200:
                raise ProviderError(f"GitHub API answered {status}")
            try:
                found.append(orjson.loads(body))
            except orjson.JSONDecodeError:
                raise ProviderError("GitHub API answer is not JSON") from None
        user, emails = found
        if not isinstance(user, dict) or not isinstance(emails, list):
            raise ProviderError("GitHub API answer has an unexpected shape")
        return user, emails


def token_auth_method(provider: OAuthProviderSettings, metadata: ProviderMetadata) -> str:
    """OAUTH_<NAME>_TOKEN_AUTH when set (the client's registration decides), else the
    method the discovery document offers (client_secret_basic before client_secret_post)."""
    return provider.token_auth or metadata.token_auth_method


def token_answer(data: dict[str, Any], *, id_token: bool = True) -> TokenAnswer:
    """The ID token (none for plain OAuth 2.0), and the access token when it is usable as a
    Bearer (RFC 6750)."""
    found = data.get("id_token") if id_token else None
    if id_token and (not isinstance(found, str) or not found):
        raise TokenRefused("token answer carries no id_token")
    access_token = data.get("access_token")
    token_type = data.get("token_type")
    bearer = token_type is None or (isinstance(token_type, str) and token_type.lower() == "bearer")
    usable = (
        bearer
        and isinstance(access_token, str)
        and len(access_token) <= MAX_ACCESS_TOKEN
        and _BEARER_TOKEN.fullmatch(access_token) is not None
    )
    if not id_token and not usable:
        raise TokenRefused("token answer carries no usable access_token")
    return TokenAnswer(
        id_token=found if isinstance(found, str) else None,
        access_token=access_token if usable else None,
    )


def _error_code(body: bytes) -> str:
    """Only the OAuth `error` code of a refusal, never the rest of the body."""
    try:
        data = parse_object(body, what="token error")
    except ProviderError:
        return "(no error code)"
    error = data.get("error")
    return (
        error if isinstance(error, str) and PROVIDER_ERROR_CODE.match(error) else "(no error code)"
    )
