"""The admin portal (issue 30 part 4): an owner's single-use link lets someone without an
account configure the account's SSO connection or SCIM directory, and nothing else."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import urlsplit

from tenantd.app.plugins import registered_sweeps
from tenantd.ops.sweeps import run_sweep
from tests.accounts.helpers import Team, audit_actions
from tests.helpers import data, error
from tests.sso.helpers import answer, landed, start
from tests.sso.saml_idp import SamlIdp
from tests.ui.test_mfa_pages import token_in

COOKIE = "tenantd_portal"


def links(team: Team) -> str:
    return f"/api/v1/accounts/{team.account_id}/admin-portal-links"


async def new_link(team: Team, intent: str) -> str:
    body = await data(await team.owner_client.post(links(team), json={"intent": intent}), 201)
    assert body["intent"] == intent and body["expiresAt"]
    parts = urlsplit(body["url"])
    assert parts.path == "/portal" and parts.query.startswith("token=")
    return f"{parts.path}?{parts.query}"


async def open_portal(browser: Any, link: str) -> Any:
    """Open the link as the IT admin does: its page, then Continue."""
    page = await browser.get(link)
    assert page.status == 200, await page.text()
    html = await page.text()
    token = re.search(r'name="token" value="([^"]+)"', html)
    assert token
    return await browser.post(
        "/portal",
        data={"csrf": token_in(html, "/portal"), "token": token.group(1)},
        allow_redirects=False,
    )


async def portal_browser(make_client: Any, team: Team, intent: str) -> Any:
    browser = await make_client()
    opened = await open_portal(browser, await new_link(team, intent))
    assert opened.status == 303, await opened.text()
    assert opened.headers["Location"] == f"/portal/{intent}"
    return browser


async def test_only_the_owner_creates_links_and_the_intent_is_checked(team: Team, db: Any) -> None:
    await new_link(team, "sso")
    await error(await team.admin_client.post(links(team), json={"intent": "sso"}), 403)
    await error(await team.member_client.post(links(team), json={"intent": "directory"}), 403)
    await error(
        await team.owner_client.post(links(team), json={"intent": "billing"}),
        422,
        "VALIDATION_ERROR",
    )
    stored = await db.fetch_all("SELECT token_hash FROM admin_portal_links")
    assert len(stored) == 1 and len(bytes(stored[0]["token_hash"])) == 32  # a digest, not T
    assert "admin_portal.link_created" in await audit_actions(db, team.account_id)


async def test_the_link_opens_once_and_reloads_keep_the_session(
    team: Team, make_client: Any
) -> None:
    link = await new_link(team, "sso")
    browser = await make_client()
    opened = await open_portal(browser, link)
    assert opened.status == 303
    cookie = opened.cookies[COOKIE]
    assert cookie["httponly"] and cookie["path"] == "/portal" and cookie["samesite"] == "Strict"
    for _ in range(2):  # reloads work
        page = await browser.get("/portal/sso")
        assert page.status == 200, await page.text()
        assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert "Okta" in await page.text() and "Microsoft Entra ID" in await page.text()
    again = await make_client()
    refused = await open_portal(again, link)
    assert refused.status == 404
    assert COOKIE not in refused.cookies
    assert (await again.get("/portal/sso")).status == 403


async def test_an_expired_link_is_refused(team: Team, make_client: Any, db: Any) -> None:
    link = await new_link(team, "directory")
    await db.execute("UPDATE admin_portal_links SET expires_at = now() - interval '1 second'")
    browser = await make_client()
    assert (await open_portal(browser, link)).status == 404
    assert (await browser.get("/portal/directory")).status == 403


async def test_an_expired_session_ends(team: Team, make_client: Any, db: Any) -> None:
    browser = await portal_browser(make_client, team, "directory")
    assert (await browser.get("/portal/directory")).status == 200
    await db.execute(
        "UPDATE admin_portal_links SET session_expires_at = now() - interval '1 second'"
    )
    assert (await browser.get("/portal/directory")).status == 403


async def test_the_session_touches_only_its_account_and_intent(
    team: Team, make_team: Any, make_client: Any, db: Any
) -> None:
    other = await make_team(domain="other.example.com")
    theirs = await data(
        await other.owner_client.post(
            f"/api/v1/accounts/{other.account_id}/sso-connections",
            json={
                "type": "oidc",
                "domains": ["other.example.com"],
                "issuer": "https://idp.other.example.com",
                "clientId": "c",
                "clientSecret": "s",
            },
        ),
        201,
    )
    browser = await portal_browser(make_client, team, "sso")
    # the other intent: neither its page nor its form
    assert (await browser.get("/portal/directory")).status == 403
    html = await (await browser.get("/portal/sso")).text()
    posted = await browser.post(
        "/portal/directory", data={"csrf": token_in(html, "/portal/sso"), "name": "x"}
    )
    assert posted.status == 403
    # another account's connection: not found through this session
    action = f"/portal/sso/{theirs['id']}"
    page = await browser.get("/portal/sso")
    assert theirs["id"] not in await page.text()
    changed = await browser.post(
        action, data={"csrf": "0" * 64, "issuer": "https://evil.example"}, allow_redirects=False
    )
    assert changed.status in (403, 404)
    row = await db.fetch_one(
        "SELECT issuer FROM sso_connections WHERE id = %(c)s", {"c": uuid.UUID(theirs["id"])}
    )
    assert row["issuer"] == "https://idp.other.example.com"
    assert await db.fetch_val("SELECT count(*) FROM directories") == 0
    # the API is not open to the portal session either
    assert (await browser.get(f"/api/v1/accounts/{team.account_id}/sso-connections")).status == 401


async def test_a_saml_connection_made_through_the_portal_signs_people_in(
    team: Team, make_client: Any, saml_idp: SamlIdp, db: Any
) -> None:
    browser = await portal_browser(make_client, team, "sso")
    html = await (await browser.get("/portal/sso")).text()
    acs = re.search(r'data-testid="acs-url">([^<]+)<', html)
    assert acs and acs.group(1).endswith("/acs")
    posted = await browser.post(
        "/portal/sso",
        data={
            "csrf": token_in(html, "/portal/sso"),
            "type": "saml",
            "domains": "acme.example.com",
            "idpMetadataXml": saml_idp.metadata_xml(),
        },
        allow_redirects=False,
    )
    assert posted.status == 303, await posted.text()
    connections = await data(
        await team.owner_client.get(f"/api/v1/accounts/{team.account_id}/sso-connections")
    )
    [connection] = connections
    assert connection["acsUrl"] == acs.group(1)  # what the page showed before it existed
    shown = await (await browser.get("/portal/sso?saved=1")).text()
    assert connection["spEntityId"] in shown and "The connection is saved." in shown
    entry = await db.fetch_one(
        "SELECT actor_user_id, data FROM audit_log WHERE action = 'sso_connection.created'"
    )
    assert entry["actor_user_id"] is None and entry["data"]["via"] == "admin_portal"

    metadata = await browser.get(f"/sso/saml/{connection['id']}/metadata")
    saml_idp.sp_metadata.append(await metadata.text())
    person = await make_client(origin=None)
    flow = await start(person, saml_idp, connection)
    assert landed(await flow.post(answer(saml_idp, flow, "new@acme.example.com"))) == "/"

    # the update form replaces the identity provider's parts
    html = await (await browser.get("/portal/sso")).text()
    action = f"/portal/sso/{connection['id']}"
    updated = await browser.post(
        action,
        data={
            "csrf": token_in(html, action),
            "idpEntityId": saml_idp.entity_id,
            "idpSsoUrl": saml_idp.sso_url,
            "idpCertificate": saml_idp.certificate_pem,
        },
        allow_redirects=False,
    )
    assert updated.status == 303, await updated.text()
    assert "sso_connection.updated" in await audit_actions(db, team.account_id)


async def test_a_bad_form_shows_the_page_again_with_the_problem(
    team: Team, make_client: Any
) -> None:
    browser = await portal_browser(make_client, team, "sso")
    html = await (await browser.get("/portal/sso")).text()
    posted = await browser.post(
        "/portal/sso",
        data={"csrf": token_in(html, "/portal/sso"), "type": "saml", "domains": "gmail.com"},
    )
    assert posted.status == 422
    assert 'data-testid="error"' in await posted.text()


async def test_a_directory_made_through_the_portal_shows_its_token_once(
    team: Team, make_client: Any, db: Any, aiohttp_client: Any, server: Any
) -> None:
    browser = await portal_browser(make_client, team, "directory")
    html = await (await browser.get("/portal/directory")).text()
    assert "scim-token" not in html
    posted = await browser.post(
        "/portal/directory",
        data={"csrf": token_in(html, "/portal/directory"), "name": "Okta"},
    )
    assert posted.status == 200
    shown = await posted.text()
    token = re.search(r'data-testid="scim-token">([^<]+)<', shown)
    base = re.search(r'data-testid="scim-base-url">([^<]+)<', shown)
    assert token and base
    assert posted.headers["Cache-Control"] == "no-store"
    reloaded = await (await browser.get("/portal/directory")).text()
    assert token.group(1) not in reloaded and base.group(1) in reloaded
    scim = await aiohttp_client(server, headers={"Authorization": f"Bearer {token.group(1)}"})
    path = urlsplit(base.group(1)).path
    assert (await scim.get(f"{path}/ServiceProviderConfig")).status == 200
    entry = await db.fetch_one(
        "SELECT actor_user_id, data FROM audit_log WHERE action = 'directory.created'"
    )
    assert entry["actor_user_id"] is None and entry["data"]["via"] == "admin_portal"
    assert "admin_portal.link_opened" in await audit_actions(db, team.account_id)


async def test_the_sweep_deletes_only_dead_links(
    team: Team, make_client: Any, services: Any, db: Any
) -> None:
    await new_link(team, "sso")  # live, unopened
    await portal_browser(make_client, team, "directory")  # opened, session live
    await new_link(team, "sso")
    await db.execute(
        "UPDATE admin_portal_links SET expires_at = now() - interval '1 minute'"
        " WHERE id = (SELECT id FROM admin_portal_links ORDER BY created_at DESC LIMIT 1)"
    )
    await db.execute(
        "UPDATE admin_portal_links SET expires_at = now() - interval '1 minute'"
        " WHERE opened_at IS NOT NULL"
    )  # its session still lives: kept
    outcome = await run_sweep(services, registered_sweeps()["admin_portal"])
    assert outcome.counts == {"admin_portal_links": 1}
    assert await db.fetch_val("SELECT count(*) FROM admin_portal_links") == 2
