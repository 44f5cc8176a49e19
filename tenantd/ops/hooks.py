"""cleanup_ctx hooks of the ops domain and the probes into other domains' resources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web

from tenantd import appkeys
from tenantd.ops.config import ops_config
from tenantd.ops.metrics import Metrics


def sse_client_count(app: web.Application) -> Callable[[], int] | None:
    """How many SSE streams this process serves (looked up at scrape time: the SSE hook
    starts after ours)."""
    from tenantd.notifications.channels.sse import FEED_KEY

    def count() -> int:
        feed = app.get(FEED_KEY)
        return feed.stream_count if feed is not None else 0

    return count


def sse_listener_probe(app: web.Application) -> Callable[[], bool | None] | None:
    """Whether this process's LISTEN connection is up (None: the SSE hub is not running)."""
    from tenantd.notifications.channels.sse import FEED_KEY

    def connected() -> bool | None:
        feed = app.get(FEED_KEY)
        if feed is None:
            return None
        return feed.hub.backend_pid() is not None

    return connected


async def metrics_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx hook: this application's metrics registry and the one task per process
    that refreshes its database figures (it also folds metric_counts, so it runs even with
    /metrics turned off)."""
    registry = Metrics()
    app[appkeys.metrics] = registry
    settings = app[appkeys.settings]
    if settings.notifications_sse_enabled:
        registry.sse_clients = sse_client_count(app)
    every = ops_config(settings).metrics_refresh_seconds
    async with registry.refreshing(app[appkeys.services].db, every):
        yield
