"""/readyz and /metrics."""

from __future__ import annotations

import hmac

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.errors import Forbidden, NotFound
from tenantd.ops.config import ProcessSettings
from tenantd.ops.metrics import CONTENT_TYPE, METRICS
from tenantd.ops.readiness import readiness
from tenantd.pubsub.hub import PUBSUB
from tenantd.settings import SETTINGS
from tenantd.web.json import json_response
from tenantd.web.schemas import ApiModel
from tenantd.web.spec import OPEN_AS_IS, Routes

ROUTES = Routes("health")


class ReadyStatus(ApiModel):
    status: str
    checks: dict[str, object]


@ROUTES.get(
    "/readyz",
    **OPEN_AS_IS,
    response=ReadyStatus,
    responses={503: "Not ready: database down, migrations pending or listener disconnected"},
    summary="Readiness: migrations applied, SSE listener connected",
)
async def readyz(request: web.Request) -> web.Response:
    result = await readiness(request.app[DATABASE], request.app[SETTINGS], request.app.get(PUBSUB))
    body = {"status": "ready" if result.ready else "not_ready", "checks": result.checks}
    return json_response(body, status=200 if result.ready else 503)


@ROUTES.get(
    "/metrics",
    **OPEN_AS_IS,
    produces="text/plain",
    responses={403: "Metrics token missing or wrong (TENANTD_METRICS_TOKEN)"},
    summary="Prometheus metrics (text exposition format)",
)
async def metrics(request: web.Request) -> web.Response:
    process = request.app[SETTINGS].section(ProcessSettings)
    registry = request.app.get(METRICS)
    if not process.metrics_enabled or registry is None:
        raise NotFound()
    if process.metrics_token is not None:
        presented = request.headers.get("Authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {process.metrics_token}".encode()):
            raise Forbidden("A valid metrics bearer token is required")
    # The database figures come from the refresh task (app/hooks.py): a scrape reads none.
    return web.Response(body=await registry.exposition(), headers={"Content-Type": CONTENT_TYPE})
