"""The application factory: one create_app, every resource tied to cleanup_ctx."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from tenantd import appkeys
from tenantd.services import open_services
from tenantd.settings import Settings
from tenantd.web.middlewares import request_middleware
from tenantd.web.parser_log import ServerLog
from tenantd.web.routing import WEBHOOK_BODY_LIMIT, Routes, register

log = logging.getLogger(__name__)

Hook = Callable[[web.Application], AsyncIterator[None]]


def route_tables() -> list[Routes]:
    """Every domain's routes. Each domain owns its views module."""
    from tenantd.accounts import views as accounts_views
    from tenantd.auth import views as auth_views
    from tenantd.auth.oauth import views as oauth_views
    from tenantd.email.webhooks import views as email_webhook_views
    from tenantd.notifications import views as notification_views
    from tenantd.ops import views as ops_views
    from tenantd.web import health, openapi

    return [
        health.routes,
        ops_views.routes,
        openapi.routes,
        auth_views.routes,
        accounts_views.routes,
        oauth_views.routes,
        email_webhook_views.routes,
        notification_views.routes,
    ]


def background_hooks() -> list[Hook]:
    """cleanup_ctx hooks of the domains (job runner, scheduler, SSE listener), in start order."""
    from tenantd.auth.context_cache import context_cache_ctx
    from tenantd.jobs.runner import job_runner_ctx
    from tenantd.notifications.channels.sse import sse_ctx
    from tenantd.ops.hooks import metrics_ctx
    from tenantd.ops.scheduler import scheduler_ctx
    from tenantd.ops.shutdown import shutdown_ctx
    from tenantd.pubsub import pubsub_ctx

    return [
        pubsub_ctx,
        context_cache_ctx,
        shutdown_ctx,
        metrics_ctx,
        job_runner_ctx,
        scheduler_ctx,
        sse_ctx,
    ]


def create_app(
    settings: Settings,
    database_url: str,
    *,
    extra_routes: list[Routes] | None = None,
    on_services: Callable[[web.Application], Awaitable[None]] | None = None,
) -> web.Application:
    app = web.Application(
        middlewares=[request_middleware],
        client_max_size=WEBHOOK_BODY_LIMIT,
        handler_args={"logger": ServerLog()},  # parser rejections: one rate-limited warning
    )
    app[appkeys.settings] = settings

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        async with open_services(settings, database_url) as services:
            app[appkeys.services] = services
            if on_services is not None:
                await on_services(app)
            yield

    app.cleanup_ctx.append(services_ctx)
    for hook in background_hooks():
        app.cleanup_ctx.append(hook)
    register(app, *route_tables(), *(extra_routes or []))
    return app
