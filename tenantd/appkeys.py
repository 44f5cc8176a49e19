"""Every typed key of the aiohttp application and request state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.auth.principal import Principal
    from tenantd.ops.metrics import Metrics
    from tenantd.ops.scheduler import SweepScheduler
    from tenantd.pubsub.hub import PubSubHub
    from tenantd.services import Services

settings = web.AppKey("settings", Settings)
services: web.AppKey[Services] = web.AppKey("services")
pubsub: web.AppKey[PubSubHub] = web.AppKey("pubsub")
metrics: web.AppKey[Metrics] = web.AppKey("metrics")
scheduler: web.AppKey[SweepScheduler] = web.AppKey("scheduler")

# Per-request state
request_id = web.RequestKey("request_id", str)
route_spec: web.RequestKey[Any] = web.RequestKey("route_spec")
principal: web.RequestKey[Principal | None] = web.RequestKey("principal")
