"""What the OAuth tests share besides fixtures: the fake provider's registration, a browser
that walks the flow, and reading a refusal redirect."""

from __future__ import annotations

from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp.test_utils import TestClient

from tests.helpers import ORIGIN

PROVIDER = "fake"
CLIENT_ID = "tenantd-test-client"
CLIENT_SECRET = "client-secret-value-7f3a9c"
CALLBACK_PATH = f"/api/v1/auth/oauth/{PROVIDER}/callback"
REDIRECT_URI = f"{ORIGIN}{CALLBACK_PATH}"


@dataclass
class Browser:
    """One browser: our API through `client`, the provider through `idp_session`."""

    client: TestClient[Any, Any]
    idp_session: aiohttp.ClientSession

    async def start(self, provider: str = PROVIDER, return_to: str | None = None) -> str:
        params = {"returnTo": return_to} if return_to is not None else None
        response = await self.client.get(
            f"/api/v1/auth/oauth/{provider}/start", params=params, allow_redirects=False
        )
        assert response.status == 302, await response.text()
        return response.headers["Location"]

    async def authorize(self, authorize_url: str) -> str:
        """Visit the provider; return the callback path (with its query) it sends us to."""
        async with self.idp_session.get(authorize_url, allow_redirects=False) as response:
            assert response.status == 302, await response.text()
            location = response.headers["Location"]
        parts = urlsplit(location)
        assert f"{parts.scheme}://{parts.netloc}" == ORIGIN
        return f"{parts.path}?{parts.query}"

    async def callback(self, path_qs: str) -> aiohttp.ClientResponse:
        return await self.client.get(path_qs, allow_redirects=False)

    async def sign_in(
        self, return_to: str | None = None, provider: str = PROVIDER
    ) -> aiohttp.ClientResponse:
        authorize_url = await self.start(provider, return_to=return_to)
        return await self.callback(await self.authorize(authorize_url))

    def set_state_cookie(self, value: str) -> None:
        """Plant a state cookie the way the start route sets it (scoped to the callback)."""
        cookie: SimpleCookie = SimpleCookie()
        cookie["oauth_state"] = value
        cookie["oauth_state"]["path"] = CALLBACK_PATH
        self.client.session.cookie_jar.update_cookies(
            cookie, response_url=self.client.make_url("/")
        )

    def cookie(self, name: str) -> str | None:
        for morsel in self.client.session.cookie_jar:
            if morsel.key == name:
                return morsel.value
        return None

    async def me(self) -> dict[str, Any]:
        response = await self.client.get("/api/v1/users/me")
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body


def login_error(response: aiohttp.ClientResponse) -> dict[str, str]:
    """The query of a refusal redirect to /login (asserting it is one)."""
    assert response.status == 302
    location = urlsplit(response.headers["Location"])
    assert location.path == "/login" and not location.netloc, response.headers["Location"]
    return {k: v[0] for k, v in parse_qs(location.query).items()}
