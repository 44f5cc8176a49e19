"""The guard of server routes (`Access.API_KEY`): `Authorization: Bearer tdk_...` holding the
route's scope. It reads no cookie, so a browser session never opens a server route; the
session guards read no Authorization header, so a key never opens a user route."""

from __future__ import annotations

from aiohttp import web

from tenantd.apikeys.cache import API_KEY_CACHE
from tenantd.apikeys.service import invalid_key, missing_key, require_scope, verify_token
from tenantd.principal import ACTING_KEY
from tenantd.services import SERVICES
from tenantd.web.spec import CURRENT_ROUTE


def bearer_token(request: web.Request) -> str:
    header = request.headers.get("Authorization")
    if not header:
        raise missing_key()
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise invalid_key()
    return token


async def require_api_key(request: web.Request) -> None:
    """401 without a valid key, 403 when the key lacks the route's scope; else the acting
    key goes on the request (`principal.acting_key`)."""
    spec = request[CURRENT_ROUTE]
    token = bearer_token(request)
    key = await verify_token(request.app[SERVICES], request.app[API_KEY_CACHE], token)
    assert spec.scope is not None  # RouteSpec insists: API_KEY routes name their scope
    require_scope(key, spec.scope)
    request[ACTING_KEY] = key
