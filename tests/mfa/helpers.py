"""Helpers of the MFA tests: signed-in browsers, TOTP enrolment with an independent
implementation (pyotp), the password login's two steps, token claims, and Chromium's
virtual authenticator for the passkey browser tests."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt
import pyotp

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.identity.sessions import issue_session
from tenantd.settings import Settings
from tests.factories import Factory, UserRecord
from tests.helpers import data

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page


@dataclass
class Enrolled:
    secret: str
    recovery_codes: list[str]

    def code(self, offset_steps: int = 0) -> str:
        """The RFC 6238 code of the current step (+ offset), computed by pyotp."""
        return pyotp.TOTP(self.secret).at(time.time() + 30 * offset_steps)


def cookie(client: Any, name: str) -> str | None:
    for morsel in client.session.cookie_jar:
        if morsel.key == name:
            return str(morsel.value)
    return None


def claims(client: Any) -> dict[str, Any]:
    """The access token's claims as the browser holds it (not verified: the server did)."""
    token = cookie(client, "auth_token")
    assert token, "no auth_token cookie"
    result: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return result


async def signed_in(
    make_client: Any,
    db: Database,
    settings: Settings,
    user: UserRecord,
    *,
    account_id: uuid.UUID | None = None,
    auth_age: float = 0.0,
    amr: tuple[str, ...] = ("pwd",),
) -> Any:
    """A browser holding a fresh session of `user` that authenticated `auth_age` seconds ago."""
    client = await make_client()
    async with db.connection() as conn:
        issued = await issue_session(
            conn,
            settings,
            keyring=client.server.app[DOMAINS].identity.keyring,
            user_id=user.id,
            account_id=account_id or user.account_id,
            amr=amr,
            auth_time=time.time() - auth_age,
        )
    client.session.cookie_jar.update_cookies(
        {"auth_token": issued.access_token, "refresh_token": issued.refresh_token},
        response_url=client.make_url("/"),
    )
    return client


async def enrol_totp(client: Any) -> Enrolled:
    setup = await data(await client.post("/api/v1/auth/mfa/totp/setup"))
    assert setup["otpauthUri"].startswith("otpauth://totp/")
    assert setup["qrSvg"].startswith("<svg")
    secret = setup["secret"]
    confirmed = await data(
        await client.post("/api/v1/auth/mfa/totp/confirm", json={"code": pyotp.TOTP(secret).now()})
    )
    return Enrolled(secret=secret, recovery_codes=confirmed["recoveryCodes"])


async def password_step(client: Any, user: UserRecord) -> dict[str, Any]:
    """POST /login for a user with a factor: the ticket answer (no session cookie)."""
    answer = await data(
        await client.post(
            "/api/v1/auth/login", json={"email": user.email, "password": user.password}
        )
    )
    assert answer["mfaRequired"] is True, answer
    return dict(answer)


async def user_with_totp(
    factory: Factory, make_client: Any, db: Database, settings: Settings, **kw: Any
) -> tuple[UserRecord, Enrolled]:
    user = await factory.user(**kw)
    browser = await signed_in(make_client, db, settings, user)
    return user, await enrol_totp(browser)


# A platform authenticator that keeps discoverable credentials and verifies the user, with
# no prompt (presence is simulated): Chrome DevTools Protocol's WebAuthn domain.
VIRTUAL_AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


async def add_virtual_authenticator(context: BrowserContext, page: Page) -> None:
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    await cdp.send("WebAuthn.addVirtualAuthenticator", {"options": VIRTUAL_AUTHENTICATOR})


async def browser_amr(context: BrowserContext) -> list[str]:
    """The `amr` of the access token the browser holds (not verified: the server did)."""
    token = next(c["value"] for c in await context.cookies() if c["name"] == "auth_token")
    return list(jwt.decode(token, options={"verify_signature": False})["amr"])
