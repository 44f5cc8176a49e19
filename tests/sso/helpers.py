"""What the SSO tests share: adding a SAML connection wired to the test IdP, and walking a
browser through an SP-initiated sign-in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp

from tests.helpers import data
from tests.sso.saml_idp import SamlIdp

IDP_ORIGIN = "https://idp.example.test"  # the Origin of the IdP's auto-posting form


async def add_saml(
    client: Any,
    account_id: uuid.UUID,
    idp: SamlIdp,
    *,
    domains: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A SAML connection for the IdP (entity id, SSO URL, certificate); the IdP learns the
    service provider's metadata from GET /sso/saml/{id}/metadata, as an admin uploads it."""
    body = {
        "type": "saml",
        "domains": domains or ["acme.example.com"],
        "idpEntityId": idp.entity_id,
        "idpSsoUrl": idp.sso_url,
        "idpCertificate": idp.certificate_pem,
        **extra,
    }
    response = await client.post(f"/api/v1/accounts/{account_id}/sso-connections", json=body)
    connection: dict[str, Any] = await data(response, 201)
    metadata = await client.get(f"/sso/saml/{connection['id']}/metadata")
    assert metadata.status == 200, await metadata.text()
    assert metadata.content_type == "application/samlmetadata+xml"
    idp.sp_metadata.append(await metadata.text())
    return connection


@dataclass
class SamlFlow:
    """One browser's SP-initiated sign-in: the request id the IdP answers."""

    browser: Any
    connection: dict[str, Any]
    request_id: str

    async def post(self, saml_response: str, relay_state: str = "/") -> aiohttp.ClientResponse:
        return await self.browser.post(
            f"/sso/saml/{self.connection['id']}/acs",
            data={"SAMLResponse": saml_response, "RelayState": relay_state},
            headers={"Origin": IDP_ORIGIN},
            allow_redirects=False,
        )


async def start(
    browser: Any, idp: SamlIdp, connection: dict[str, Any], *, return_to: str | None = None
) -> SamlFlow:
    params = {"connection": connection["id"], **({"returnTo": return_to} if return_to else {})}
    response = await browser.get("/sso/start", params=params, allow_redirects=False)
    assert response.status == 302, await response.text()
    location = response.headers["Location"]
    assert location.startswith(idp.sso_url + "?"), location
    # The binding cookie is SameSite=None, hence Secure: a browser on https sends it with the
    # IdP's cross-site POST; this test browser speaks http, so it is planted as sent.
    set_by_start = response.cookies["sso_binding"]
    acs_path = urlsplit(connection["acsUrl"]).path
    assert set_by_start["samesite"] == "None" and set_by_start["secure"]
    assert set_by_start["path"] == acs_path and set_by_start["httponly"]
    planted: SimpleCookie = SimpleCookie()
    planted["sso_binding"] = set_by_start.value
    planted["sso_binding"]["path"] = acs_path
    browser.session.cookie_jar.update_cookies(planted, response_url=browser.make_url("/"))
    return SamlFlow(browser, connection, idp.request_id(location))


def answer(idp: SamlIdp, flow: SamlFlow, email: str, **kwargs: Any) -> str:
    return idp.answer(
        sp_entity_id=flow.connection["spEntityId"],
        acs_url=flow.connection["acsUrl"],
        email=email,
        in_response_to=flow.request_id,
        **kwargs,
    )


def landed(response: aiohttp.ClientResponse) -> str:
    """Where a successful ACS sends the browser (asserting it is a same-origin path)."""
    assert response.status == 302, response.headers.get("Location")
    location = response.headers["Location"]
    assert location.startswith("/") and not location.startswith("/login"), location
    return location


def refusal(response: aiohttp.ClientResponse) -> str:
    """The `error` of a refusal redirect to /login."""
    assert response.status == 302
    location = urlsplit(response.headers["Location"])
    assert location.path == "/login", response.headers["Location"]
    return parse_qs(location.query)["error"][0]
