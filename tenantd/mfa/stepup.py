"""Step-up: dangerous actions need an authentication at most REAUTH_MAX_AGE_SECONDS old.

`require_recent_auth` is the one check every domain calls (password change, factor removal,
recovery codes, ownership transfer, account deletion and policy, API keys, email change):
it reads the access token's `auth_time` (kept by the session family across refreshes and
moved by POST /api/v1/auth/reauth) and refuses with 403 REAUTH_REQUIRED naming the
methods the caller can reauthenticate with.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from tenantd.db import Conn
from tenantd.errors import ReauthRequired
from tenantd.mfa import queries

if TYPE_CHECKING:
    from tenantd.principal import Principal
    from tenantd.services import Services

# Tests may replace the clock; production reads the wall clock.
clock: Callable[[], float] = time.time


def is_recent(principal: Principal, max_age_seconds: int, *, now: float | None = None) -> bool:
    """Whether the token's authentication is recent enough (no auth_time: never)."""
    if principal.auth_time is None:
        return False
    moment = clock() if now is None else now
    return moment - principal.auth_time <= max_age_seconds


async def reauth_methods(conn: Conn, user_id: uuid.UUID) -> list[str]:
    """What POST /api/v1/auth/reauth accepts from this user: password, totp, passkey."""
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
    return methods


async def require_recent_auth(services: Services, principal: Principal) -> None:
    """Refuse (403 REAUTH_REQUIRED, details.methods) unless the caller authenticated within
    REAUTH_MAX_AGE_SECONDS. A user with no method at all (signed in with a provider only)
    gets an empty list: signing in again is the way."""
    if is_recent(principal, services.settings.reauth_max_age_seconds):
        return
    async with services.db.connection() as conn:
        methods = await reauth_methods(conn, principal.user_id)
    raise ReauthRequired(methods)
