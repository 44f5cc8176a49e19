"""Starting a session at sign-in (password, email link, OpenID Connect), the one place that
also records the security event and, for a browser never seen for the user, queues the "new
sign-in" mail, all in the sign-in's transaction (a rolled-back sign-in leaves nothing)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenantd.audit import security
from tenantd.db import Conn
from tenantd.identity import queries
from tenantd.identity.devices import describe, usable_device_id
from tenantd.identity.domain import Identity
from tenantd.identity.sessions import ClientMeta, IssuedTokens, issue_session
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.sso_policy import refuse_unless_sso
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.ops.ratelimit import signed_device

if TYPE_CHECKING:
    pass

AUTH_EMAIL = "auth.email"  # the job kind that sends the auth mails (tenantd/auth/jobs.py)
NEW_SIGNIN = "new_signin"

# How a session began (the `method` of GET /api/v1/auth/sessions); an OpenID Connect sign-in
# is named by its provider ("google").
PASSWORD = "password"
EMAIL_LINK = "email_link"


@dataclass(frozen=True)
class ProviderRedirect:
    """The way to a provider's sign-in page (OpenID Connect, SSO): its URL and the flow's
    cookie (its state), which the answer must bring back."""

    location: str
    cookie: str
    value: str
    path: str
    max_age: int
    same_site: str  # "None" when the answer is a cross-site form POST (Apple, SAML)


@dataclass(frozen=True)
class Started:
    tokens: IssuedTokens
    device: str  # the browser's device cookie value (to set again: its lifetime renews)
    new_browser: bool


async def record_security(
    conn: Conn,
    client: ClientMeta | None,
    *,
    user_id: uuid.UUID,
    kind: str,
    session_id: uuid.UUID | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """The user's security-log entry of what this client (its address, User-Agent) did."""
    client = client or ClientMeta()
    await security.record(
        conn,
        user_id=user_id,
        kind=kind,
        session_id=session_id,
        ip=client.ip,
        user_agent=client.user_agent,
        data=data,
    )


async def start_session(
    services: Identity,
    conn: Conn,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    client: ClientMeta,
    method: str,
    amr: Sequence[str] = ("pwd",),
) -> Started:
    """Issue the session, remember the browser, record `signed_in`, queue the new-browser mail.
    `amr` says how the user proved who they are (RFC 8176), carried by the access tokens.
    A user an enforced SSO connection binds signs in only through it (403 SSO_REQUIRED)."""
    settings = services.settings
    await refuse_unless_sso(conn, user_id=user_id, method=method)
    tokens = await issue_session(
        conn,
        settings,
        keyring=services.keyring,
        user_id=user_id,
        account_id=account_id,
        client=client,
        method=method,
        amr=amr,
    )
    device = usable_device_id(client.device) or new_opaque_token()
    agent = describe(client.user_agent)
    seen = await queries.remember_device(
        conn,
        user_id=user_id,
        device_hash=token_hash(settings.secret_key, device),
        browser=agent.browser,
        os=agent.os,
    )
    # The user's first recorded browser (their sign-up) is not news to them.
    new_browser = bool(seen["inserted"] and seen["any_known"])
    session_id = tokens.access.session_id
    await record_security(
        conn,
        client,
        user_id=user_id,
        kind=security.SIGNED_IN,
        session_id=session_id,
        data={"method": method, "newBrowser": new_browser},
    )
    if new_browser and settings.section(IdentitySettings).new_signin_email:
        await services.jobs.enqueue(
            conn, AUTH_EMAIL, {"purpose": NEW_SIGNIN, "sessionId": str(session_id)}
        )
    # The cookie names the user who signed in here: a login budget of its own from now on.
    return Started(tokens, signed_device(settings.secret_key, device, seen["email"]), new_browser)


async def start_default_session(
    services: Identity,
    conn: Conn,
    *,
    user_id: uuid.UUID,
    client: ClientMeta,
    method: str,
    amr: Sequence[str],
) -> Started:
    """`start_session` in the account the user lands in without a choice (password,
    passkey, a finished MFA ticket)."""
    account_id = await queries.default_account_id(conn, user_id)
    return await start_session(
        services,
        conn,
        user_id=user_id,
        account_id=account_id,
        client=client,
        method=method,
        amr=amr,
    )
