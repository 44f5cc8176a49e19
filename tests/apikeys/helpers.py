"""Helpers of the API-key tests: probe routes of each kind (a server route per scope used
here, a requireAuth user route), an app with them, and keys minted through the service."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.apikeys import service
from tenantd.apikeys.principal import acting_key
from tenantd.apikeys.service import CreatedKey
from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.principal import current_principal
from tenantd.settings import Settings
from tenantd.web.spec import Access, Routes
from tests.helpers import SECRET

probe_routes = Routes("probe")


@probe_routes.get("/test/server/events", access=Access.API_KEY, scope="events:read")
async def server_read(request: web.Request) -> dict[str, Any]:
    """A server route needing events:read."""
    key = acting_key(request)
    return {"actor": key.actor, "name": key.name, "scopes": sorted(key.scopes)}


@probe_routes.post("/test/server/send", access=Access.API_KEY, scope="notifications:send")
async def server_write(request: web.Request) -> dict[str, Any]:
    """A server route needing notifications:send."""
    return {"actor": acting_key(request).actor}


@probe_routes.get("/test/user", summary="requireAuth probe")
async def user_route(request: web.Request) -> dict[str, Any]:
    return {"userId": current_principal(request).user_id}


def probe_app(settings: Settings, database_url: str) -> web.Application:
    return create_app(settings, database_url, extra_routes=[probe_routes])


async def new_key(
    db: Database, *scopes: str, name: str = "backend", secret_key: str = SECRET
) -> CreatedKey:
    async with db.transaction() as conn:
        return await service.create_key(
            conn, secret_key=secret_key, name=name, scopes=scopes or ("events:read",)
        )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
