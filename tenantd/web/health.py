"""Health: /healthz answers 200 when the database answers, 503 otherwise."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.db.queries import PING
from tenantd.web.json import json_response
from tenantd.web.spec import OPEN_AS_IS, Routes

ROUTES = Routes("health")


@ROUTES.get("/healthz", **OPEN_AS_IS, summary="Liveness: database reachable")
async def healthz(request: web.Request) -> web.Response:
    db = request.app[DATABASE]
    try:
        async with asyncio.timeout(2):
            await db.fetch_val(PING)
    except Exception:
        return json_response({"status": "unavailable"}, status=503)
    return json_response({"status": "ok"})
