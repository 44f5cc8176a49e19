"""Step-up: dangerous actions need an authentication at most REAUTH_MAX_AGE_SECONDS old.

`require_recent_auth` is the check behind `sensitive.require`, the guard every sensitive
action calls first (tenantd/mfa/sensitive.py holds the list; views and pages never call this):
it reads the access token's `auth_time` (kept by the session family across refreshes and
moved by POST /api/v1/auth/reauth or a provider's step-up) and refuses with 403
REAUTH_REQUIRED naming the methods the caller can reauthenticate with.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from tenantd.db import Conn
from tenantd.identity import queries
from tenantd.identity.errors import ReauthRequired
from tenantd.identity.settings import IdentitySettings, SignInSettings
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.principal import Principal


def is_recent(principal: Principal, max_age_seconds: int, *, now: float | None = None) -> bool:
    """Whether the token's authentication is recent enough (no auth_time: never)."""
    if principal.auth_time is None:
        return False
    moment = time.time() if now is None else now
    return moment - principal.auth_time <= max_age_seconds


async def reauth_providers(conn: Conn, settings: Settings, user_id: uuid.UUID) -> list[str]:
    """The configured providers the user has an identity at that can confirm it is them
    (GET /api/v1/auth/oauth/{provider}/reauth)."""
    configured = {
        p.name for p in settings.section(SignInSettings).oauth_providers if p.proves_fresh_sign_in
    }
    if not configured:
        return []
    return [p for p in await queries.linked_providers(conn, user_id) if p in configured]


async def reauth_methods(
    conn: Conn, user_id: uuid.UUID, *, providers: list[str] | None = None
) -> list[str]:
    """How this user can step up: password, totp, passkey (POST /api/v1/auth/reauth), and
    `provider` when `providers` (reauth_providers) is not empty."""
    summary = await queries.factor_summary(conn, user_id)
    if summary is None:
        return []
    methods = []
    if summary["password"]:
        methods.append("password")
    if summary["totp"]:
        methods.append("totp")
    if summary["passkeys"]:
        methods.append("passkey")
    if providers:
        methods.append("provider")
    return methods


async def require_recent_auth(services: Services, principal: Principal) -> None:
    """Refuse (403 REAUTH_REQUIRED, details.methods and details.providers) unless the caller
    authenticated within REAUTH_MAX_AGE_SECONDS. A user with no method at all (no password,
    factor or linked provider) gets an empty list: signing in again is the way."""
    if is_recent(principal, services.settings.section(IdentitySettings).reauth_max_age_seconds):
        return
    async with services.db.connection() as conn:
        providers = await reauth_providers(conn, services.settings, principal.user_id)
        methods = await reauth_methods(conn, principal.user_id, providers=providers)
    raise ReauthRequired(methods, providers=providers)
