"""HTTP side of the code flow: metadata, signing keys, the token request and UserInfo.

One OidcClient per shared aiohttp session of the services, so
its discovery and JWKS caches live as long as the process.
"""

from __future__ import annotations

import base64
import logging
import re
import weakref
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import jwt

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
from tenantd.settings import OAuthProviderSettings

if TYPE_CHECKING:
    from tenantd.services import Services

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
        return await self.discovery.get(provider.issuer)

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
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": code_verifier,
            "client_id": provider.client_id,
        }
        headers = {"Accept": "application/json"}
        if token_auth_method(provider, metadata) == "client_secret_basic":
            # RFC 6749 2.3.1: form-encode id and secret before base64.
            pair = f"{quote(provider.client_id, safe='')}:{quote(provider.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form["client_secret"] = provider.client_secret
        status, body = await self._request(
            "POST", metadata.token_endpoint, "token", data=form, headers=headers
        )
        if status != 200:
            raise TokenRefused(f"token endpoint answered {status} {_error_code(body)}")
        return token_answer(parse_object(body, what="token answer"))

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


def token_auth_method(provider: OAuthProviderSettings, metadata: ProviderMetadata) -> str:
    """OAUTH_<NAME>_TOKEN_AUTH when set (the client's registration decides), else the
    method the discovery document offers (client_secret_basic before client_secret_post)."""
    return provider.token_auth or metadata.token_auth_method


def token_answer(data: dict[str, Any]) -> TokenAnswer:
    """The ID token, and the access token when it is usable as a Bearer (RFC 6750)."""
    id_token = data.get("id_token")
    if not isinstance(id_token, str) or not id_token:
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
    return TokenAnswer(id_token=id_token, access_token=access_token if usable else None)


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


_CLIENTS: weakref.WeakKeyDictionary[aiohttp.ClientSession, OidcClient] = weakref.WeakKeyDictionary()


def oidc_client(services: Services) -> OidcClient:
    """The client on these services' HTTP session (created on first use, gone with it)."""
    client = _CLIENTS.get(services.http)
    if client is None:
        client = _CLIENTS[services.http] = OidcClient(services.http)
    return client
