"""Token introspection for server callers: the answer the principal cache gives tenantd's own
guard (signature, expiry, revoked jti or session, user-wide cutoff, aid membership), so a
token ended by logout is `active: false` at once, unlike a signature check alone.

Who may ask: an API key with scope `sessions:introspect` (the API-key guard's work), or a
caller whose address is in TENANTD_INTROSPECT_ALLOWED_IPS.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from aiohttp import web

from tenantd.apikeys.domain import apikeys_of
from tenantd.apikeys.guard import bearer_token
from tenantd.apikeys.principal import ACTING_KEY
from tenantd.apikeys.service import require_scope, verify_token
from tenantd.auth.domain import Auth
from tenantd.errors import Unauthorized
from tenantd.identity.guards import recheck
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.tokens import decode_access_token
from tenantd.settings import SETTINGS
from tenantd.web.ratelimit import request_ip

SCOPE = "sessions:introspect"


def allowed_address(request: web.Request) -> bool:
    """Whether the caller's address (X-Forwarded-For only from trusted proxies) is listed."""
    networks = request.app[SETTINGS].section(IdentitySettings).introspect_allowed_ips
    address = request_ip(request)
    if not networks or address is None:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


async def admit(request: web.Request) -> None:
    """The route's own guard: an allowed address, else an API key holding SCOPE, checked as
    the API-key guard checks server routes (no key or a bad one: 401; without the scope:
    403). The route is declared public so that the address alone can admit."""
    if allowed_address(request):
        return
    token = bearer_token(request)
    key = await verify_token(apikeys_of(request.app), token)
    require_scope(key, SCOPE)
    request[ACTING_KEY] = key


async def introspect(services: Auth, token: str) -> dict[str, Any]:
    """{active, sub, aid, sid, exp} of a token tenantd would accept now; else {active: false}."""
    try:
        claims = decode_access_token(services.identity.keyring, token)
        principal = await recheck(services.identity, claims)
    except Unauthorized:
        return {"active": False}
    if principal.owes_factor:  # refused by every route but step-up, enrolment and leaving
        return {"active": False}
    return {
        "active": True,
        "sub": str(principal.user_id),
        "aid": str(principal.account_id) if principal.account_id else None,
        "sid": str(principal.session_id) if principal.session_id else None,
        "exp": int(principal.expires_at),
    }
