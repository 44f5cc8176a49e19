"""Home-realm discovery on the hosted login page: the email first; a domain with an SSO
connection goes to its identity provider, every other address keeps the password form."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.accounts.helpers import Team
from tests.factories import DEFAULT_PASSWORD, Factory
from tests.sso.helpers import add_saml
from tests.sso.saml_idp import SamlIdp
from tests.ui.test_mfa_pages import post_form


async def test_an_sso_domain_goes_to_its_identity_provider(
    team: Team, saml_idp: SamlIdp, make_client: Any, factory: Factory
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client()
    page = await (await browser.get("/login")).text()
    assert 'name="sso"' in page and "Continue with single sign-on" in page

    # The button, or the email alone: to /sso/start for that connection.
    for fields in ({"sso": "1", "password": ""}, {"password": ""}):
        response = await post_form(
            browser, "/login", "/login", email="Zoe@ACME.example.com", next="/x", **fields
        )
        assert response.status in (302, 303), await response.text()
        location = urlsplit(response.headers["Location"])
        assert location.path == "/sso/start"
        assert parse_qs(location.query) == {"connection": [connection["id"]], "returnTo": ["/x"]}

    # Another domain: the password form as before.
    other = await factory.user(email="someone@elsewhere.example.com")
    response = await post_form(
        browser, "/login", "/login", email=other.email, password=DEFAULT_PASSWORD
    )
    assert response.status in (302, 303)
    assert not response.headers["Location"].startswith("/sso/")


async def test_an_enforced_domain_with_a_password_goes_to_sso_too(
    team: Team, saml_idp: SamlIdp, make_client: Any, factory: Factory
) -> None:
    pat = await factory.user(email="pat@acme.example.com", account=False)
    await factory.member(team.account_id, pat.id)
    connection = await add_saml(team.owner_client, team.account_id, saml_idp, enforce=True)
    browser = await make_client()
    response = await post_form(browser, "/login", "/login", email=pat.email, password=pat.password)
    assert response.status in (302, 303), await response.text()
    location = urlsplit(response.headers["Location"])
    assert location.path == "/sso/start"
    assert parse_qs(location.query)["connection"] == [connection["id"]]
