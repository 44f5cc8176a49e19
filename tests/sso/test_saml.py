"""SAML sign-in end to end against an identity provider built with pysaml2: SP-initiated
sign-in with just-in-time membership, and every answer that must sign no one in (replayed,
unsigned, another key, another audience, expired, wrapped, unsolicited, SHA-1)."""

from __future__ import annotations

import re
from typing import Any

from tests.accounts.helpers import Team, audit_actions
from tests.helpers import data
from tests.sso.helpers import add_saml, answer, landed, refusal, start
from tests.sso.saml_idp import SamlIdp, decode, encode

ASSERTION = re.compile(r"<ns1:Assertion\b.*?</ns1:Assertion>", re.S)
SIGNATURE = re.compile(r"<ns2:Signature\b.*?</ns2:Signature>", re.S)
ASSERTION_ID = re.compile(r'(<ns1:Assertion\b[^>]*\bID=")([^"]+)(")')


async def me(browser: Any) -> dict[str, Any]:
    response = await browser.get("/api/v1/users/me")
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_sp_initiated_sign_in_joins_the_account_just_in_time(
    team: Team, saml_idp: SamlIdp, make_client: Any, db: Any
) -> None:
    connection = await add_saml(
        team.admin_client,
        team.account_id,
        saml_idp,
        attributeMapping={"firstName": "given", "lastName": "family"},
    )
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection, return_to="/projects?tab=1")
    saml_response = answer(
        saml_idp,
        flow,
        "Alice@ACME.example.com",
        attributes={"given": ["Alice"], "family": ["Liddell"]},
    )
    response = await flow.post(saml_response)
    assert landed(response) == "/projects?tab=1"
    body = await me(browser)
    assert body["user"]["email"] == "alice@acme.example.com"
    assert body["account"]["id"] == str(team.account_id)
    assert body["role"] == "member"
    user = await db.fetch_one(
        "SELECT first_name, last_name, email_verified_at FROM users WHERE email = %(e)s",
        {"e": "alice@acme.example.com"},
    )
    assert (user["first_name"], user["last_name"]) == ("Alice", "Liddell")
    assert user["email_verified_at"] is not None
    method = await db.fetch_val(
        "SELECT method FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE u.email = 'alice@acme.example.com'"
    )
    assert method == "sso"
    actions = await audit_actions(db, team.account_id)
    assert "sso_connection.created" in actions and actions[-1] == "membership.created"
    via = await db.fetch_val(
        "SELECT data->>'via' FROM audit_log WHERE account_id = %(a)s ORDER BY id DESC LIMIT 1",
        {"a": team.account_id},
    )
    assert via == "sso"


async def test_an_existing_member_signs_in_and_keeps_their_role(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    assert landed(await flow.post(answer(saml_idp, flow, team.admin.email))) == "/"
    body = await me(browser)
    assert body["user"]["id"] == str(team.admin.id)
    assert body["role"] == "admin"


async def test_a_user_the_account_has_no_hold_on_is_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any, factory: Any
) -> None:
    """A connection never takes over someone else's user: the address is in the domain, but
    the user is no member and the account has not claimed the domain."""
    outsider = await factory.user(email="carol@acme.example.com", password=None)
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    assert refusal(await flow.post(answer(saml_idp, flow, outsider.email))) == (
        "sso_identity_conflict"
    )


async def test_an_address_outside_the_domains_is_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    response = await flow.post(answer(saml_idp, flow, "mallory@elsewhere.example.com"))
    assert refusal(response) == "sso_domain_mismatch"


async def test_a_replayed_answer_is_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    saml_response = answer(saml_idp, flow, "alice@acme.example.com")
    assert landed(await flow.post(saml_response)) == "/"
    assert refusal(await flow.post(saml_response)) == "sso_response_replayed"
    # The same assertion answering a new request of the same browser: its id is remembered.
    again = await start(browser, saml_idp, connection)
    forged = decode(saml_response).replace(flow.request_id, again.request_id)
    assert refusal(await again.post(encode(forged))) in (
        "sso_response_replayed",
        "sso_response_invalid",  # the InResponseTo inside the signed assertion differs
    )


async def test_an_answer_reaching_another_browser_is_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    """Login CSRF: an answer to a request started in one browser, posted from another."""
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    flow = await start(await make_client(origin=None), saml_idp, connection)
    flow.browser = await make_client(origin=None)
    assert refusal(await flow.post(answer(saml_idp, flow, "alice@acme.example.com"))) == (
        "sso_response_invalid"
    )


async def test_unsigned_wrong_key_wrong_audience_expired_and_sha1_answers_are_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any, tmp_path: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    other_account = await add_saml(
        team.owner_client, team.account_id, saml_idp, domains=["other.example.com"]
    )
    impostor = SamlIdp(tmp_path, key_index=1, sp_metadata=saml_idp.sp_metadata)
    weak = SamlIdp(
        tmp_path,
        sp_metadata=saml_idp.sp_metadata,
        signing_algorithm="http://www.w3.org/2000/09/xmldsig#rsa-sha1",
        digest_algorithm="http://www.w3.org/2000/09/xmldsig#sha1",
    )
    cases = {
        "unsigned": lambda flow: answer(saml_idp, flow, "a@acme.example.com", sign_assertion=False),
        "wrong key": lambda flow: answer(impostor, flow, "a@acme.example.com"),
        "wrong audience": lambda flow: saml_idp.answer(
            sp_entity_id=other_account["spEntityId"],  # for the other connection ...
            acs_url=flow.connection["acsUrl"],  # ... posted to this one
            email="a@acme.example.com",
            in_response_to=flow.request_id,
        ),
        "expired": lambda flow: answer(saml_idp, flow, "a@acme.example.com", lifetime_minutes=-10),
        "sha1": lambda flow: answer(weak, flow, "a@acme.example.com"),
    }
    browser = await make_client(origin=None)
    for name, build in cases.items():
        flow = await start(browser, saml_idp, connection)
        assert refusal(await flow.post(build(flow))) == "sso_response_invalid", name
    assert (await browser.get("/api/v1/users/me")).status == 200
    assert (await me(browser))["user"] is None


async def test_signature_wrapping_answers_are_refused(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    """The XSW family: an unsigned forged assertion beside, around or in place of the signed
    one, and a signed assertion whose content was changed."""
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)

    def forged_from(signed: str, *, same_id: bool) -> str:
        evil = SIGNATURE.sub("", signed).replace(
            "victim@acme.example.com", "attacker@acme.example.com"
        )
        return evil if same_id else ASSERTION_ID.sub(r"\1id-forged\3", evil)

    def beside(xml: str) -> str:  # forged first, signed original second
        signed = ASSERTION.search(xml).group(0)  # type: ignore[union-attr]
        return xml.replace(signed, forged_from(signed, same_id=False) + signed)

    def hidden_in_extensions(xml: str) -> str:  # forged in place, original in Extensions
        signed = ASSERTION.search(xml).group(0)  # type: ignore[union-attr]
        xml = xml.replace(signed, forged_from(signed, same_id=True))
        return re.sub(
            r"(</ns1:Issuer>)",
            r"\1<ns0:Extensions>" + signed.replace("\\", "\\\\") + "</ns0:Extensions>",
            xml,
            count=1,
        )

    def wrapped_in_advice(xml: str) -> str:  # forged in place, original in its Advice
        signed = ASSERTION.search(xml).group(0)  # type: ignore[union-attr]
        forged = forged_from(signed, same_id=True)
        forged = forged.replace(
            "</ns1:Conditions>", "</ns1:Conditions><ns1:Advice>" + signed + "</ns1:Advice>", 1
        )
        return xml.replace(signed, forged)

    def tampered(xml: str) -> str:  # the signed assertion itself, its address changed
        return xml.replace("victim@acme.example.com", "attacker@acme.example.com")

    for attack in (beside, hidden_in_extensions, wrapped_in_advice, tampered):
        flow = await start(browser, saml_idp, connection)
        xml = decode(answer(saml_idp, flow, "victim@acme.example.com"))
        forged_xml = attack(xml)
        assert forged_xml != xml, attack.__name__
        assert refusal(await flow.post(encode(forged_xml))) == "sso_response_invalid", (
            attack.__name__
        )
    assert (await me(browser))["user"] is None


async def test_idp_initiated_sign_in_is_off_by_default(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    unsolicited = saml_idp.answer(
        sp_entity_id=connection["spEntityId"],
        acs_url=connection["acsUrl"],
        email="alice@acme.example.com",
        in_response_to=None,
    )
    browser = await make_client(origin=None)
    response = await browser.post(
        f"/sso/saml/{connection['id']}/acs",
        data={"SAMLResponse": unsolicited, "RelayState": "/"},
        allow_redirects=False,
    )
    assert refusal(response) == "sso_unsolicited"


async def test_idp_initiated_sign_in_when_allowed_lands_on_a_same_origin_relay_state(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(
        team.owner_client, team.account_id, saml_idp, allowIdpInitiated=True
    )
    for relay_state, lands_on in (
        ("/reports", "/reports"),
        ("https://evil.example/phish", "/"),
        ("//evil.example/x", "/"),
    ):
        unsolicited = saml_idp.answer(
            sp_entity_id=connection["spEntityId"],
            acs_url=connection["acsUrl"],
            email="alice@acme.example.com",
            in_response_to=None,
        )
        browser = await make_client(origin=None)
        response = await browser.post(
            f"/sso/saml/{connection['id']}/acs",
            data={"SAMLResponse": unsolicited, "RelayState": relay_state},
            allow_redirects=False,
        )
        assert landed(response) == lands_on


async def test_return_to_must_be_a_same_origin_path(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection, return_to="https://evil.example/")
    assert landed(await flow.post(answer(saml_idp, flow, "alice@acme.example.com"))) == "/"


async def test_metadata_xml_connection_and_the_sp_metadata(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    response = await team.owner_client.post(
        f"/api/v1/accounts/{team.account_id}/sso-connections",
        json={
            "type": "saml",
            "domains": ["acme.example.com"],
            "idpMetadataXml": saml_idp.metadata_xml(),
        },
    )
    connection = await data(response, 201)
    assert connection["idpEntityId"] == saml_idp.entity_id
    assert connection["idpSsoUrl"] == saml_idp.sso_url
    metadata = await (await make_client()).get(f"/sso/saml/{connection['id']}/metadata")
    text = await metadata.text()
    assert f'entityID="{connection["spEntityId"]}"' in text
    assert connection["acsUrl"] in text and "HTTP-POST" in text
    saml_idp.sp_metadata.append(text)
    browser = await make_client(origin=None)
    flow = await start(browser, saml_idp, connection)
    assert landed(await flow.post(answer(saml_idp, flow, "alice@acme.example.com"))) == "/"


async def test_home_realm_discovery_by_email(
    team: Team, saml_idp: SamlIdp, make_client: Any
) -> None:
    await add_saml(team.owner_client, team.account_id, saml_idp)
    browser = await make_client(origin=None)
    found = await browser.get(
        "/sso/start", params={"email": "Someone@Acme.example.com"}, allow_redirects=False
    )
    assert found.status == 302 and found.headers["Location"].startswith(saml_idp.sso_url)
    other = await browser.get(
        "/sso/start", params={"email": "someone@elsewhere.example.com"}, allow_redirects=False
    )
    assert other.status == 302
    assert other.headers["Location"] == "/login?email=someone%40elsewhere.example.com"
