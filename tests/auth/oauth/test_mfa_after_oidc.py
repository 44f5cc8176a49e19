"""OpenID Connect sign-in of a user with a second factor: the callback lands on the MFA page
(/login/mfa?ticket=T, no session cookie); POST /api/v1/auth/mfa/verify finishes it and
answers the saved returnTo; the tokens say amr ["fed", "otp"]."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers import data, error
from tests.mfa.helpers import claims, enrol_totp


async def test_oidc_sign_in_then_second_factor(browser: Any, new_browser: Any) -> None:
    first = await browser.sign_in()
    assert first.status == 302 and first.headers["Location"] == "/"
    assert claims(browser.client)["amr"] == ["fed"]
    enrolled = await enrol_totp(browser.client)

    later = await new_browser()
    callback = await later.sign_in(return_to="/settings/security")
    assert callback.status == 302
    location = urlsplit(callback.headers["Location"])
    assert location.path == "/login/mfa"
    ticket = parse_qs(location.query)["ticket"][0]
    assert later.cookie("auth_token") is None and later.cookie("refresh_token") is None
    assert later.cookie("mfa_binding")
    assert (await later.me()) == {"user": None}

    # Another browser holding only the URL cannot use the ticket.
    thief = await new_browser()
    await error(
        await thief.client.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        ),
        401,
    )
    signed = await data(
        await later.client.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        )
    )
    assert signed["returnTo"] == "/settings/security"
    assert claims(later.client)["amr"] == ["fed", "otp"]
    me = await later.me()
    assert me["user"]["email"] == "alice@example.org" and me["user"]["mfaEnabled"] is True
