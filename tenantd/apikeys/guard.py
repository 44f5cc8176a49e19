"""The guard of server routes (`Access.API_KEY`): `Authorization: Bearer tdk_...` holding the
route's scope. It reads no cookie, so a browser session never opens a server route; the
session guards read no Authorization header, so a key never opens a user route."""

from __future__ import annotations

from aiohttp import web

from tenantd.apikeys.domain import apikeys_of
from tenantd.apikeys.principal import ACTING_KEY, ActingKey
from tenantd.apikeys.service import invalid_key, missing_key, require_scope, verify_token
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


async def check_api_key(request: web.Request, scope: str | tuple[str, ...]) -> ActingKey:
    """The request's key if it is valid and holds `scope` (401 / 403 otherwise); it also goes
    on the request. For a route that takes a key or something else (introspection from an
    allowed address): declare it PUBLIC and call this when there is an Authorization header."""
    token = bearer_token(request)
    key = await verify_token(apikeys_of(request.app), token)
    require_scope(key, scope)
    request[ACTING_KEY] = key
    return key


async def require_api_key(request: web.Request) -> None:
    """The guard of `Access.API_KEY` routes: a key holding the route's scope."""
    scope = request[CURRENT_ROUTE].scope
    assert scope is not None  # RouteSpec insists: API_KEY routes name their scope
    await check_api_key(request, scope)
