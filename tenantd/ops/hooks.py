"""cleanup_ctx hooks of the ops domain and the probes into other domains' resources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web

from tenantd import appkeys
from tenantd.ops.metrics import Metrics


def sse_client_count(app: web.Application) -> Callable[[], int] | None:
    """How many SSE clients this process serves, when the SSE hub exposes it."""
    return None


def sse_listener_probe(app: web.Application) -> Callable[[], bool | None] | None:
    """Whether this process's pub/sub listener is connected, when the SSE hub exposes it."""
    return None


async def metrics_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: this application's metrics registry."""
    registry = Metrics()
    app[appkeys.metrics] = registry
    registry.sse_clients = sse_client_count(app)
    yield
