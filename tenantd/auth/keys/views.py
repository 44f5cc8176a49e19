"""`GET /.well-known/jwks.json` and `POST /api/v1/auth/introspect`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.auth.domain import auth_of
from tenantd.auth.keys import introspection
from tenantd.auth.keys.schemas import IntrospectBody, Introspection, Jwks
from tenantd.identity.keys.service import JWKS_MAX_AGE_SECONDS
from tenantd.web.json import json_response
from tenantd.web.spec import OPEN_AS_IS, Routes

ROUTES = Routes("keys")

CACHE_CONTROL = f"public, max-age={JWKS_MAX_AGE_SECONDS}"


@ROUTES.get(
    "/.well-known/jwks.json",
    **OPEN_AS_IS,
    response=Jwks,
    summary="Public keys of access tokens: current, next and retired until their tokens expired",
)
async def jwks(request: web.Request) -> web.Response:
    body = auth_of(request.app).identity.keyring.jwks()
    return json_response(body, headers={"Cache-Control": CACHE_CONTROL})


@ROUTES.post(
    "/api/v1/auth/introspect",
    # Admitted by introspection.admit: an API key with sessions:introspect, or an address in
    # TENANTD_INTROSPECT_ALLOWED_IPS (which the API-key guard alone would refuse).
    **OPEN_AS_IS,
    response=Introspection,
    responses={
        401: "Neither an allowed address nor a valid API key (Authorization: Bearer tdk_...)",
        403: "The API key lacks the scope sessions:introspect",
    },
    summary="Whether an access token holds now (revocation included), for server callers",
)
async def introspect(request: web.Request, body: IntrospectBody) -> dict[str, Any]:
    await introspection.admit(request)
    return await introspection.introspect(auth_of(request.app), body.token)
