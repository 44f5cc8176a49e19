"""The application factory: one create_app, every resource tied to cleanup_ctx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from tenantd.accounts.domain import accounts_of
from tenantd.accounts.service import refuse_owed_factor
from tenantd.apikeys.guard import require_api_key
from tenantd.apikeys.principal import ACTING_KEY
from tenantd.app.bundle import open_services
from tenantd.app.hooks import HOOKS
from tenantd.app.routes import PAGE_ROUTES, ROUTES
from tenantd.bundle import DOMAINS
from tenantd.db import DATABASE
from tenantd.identity.guards import guard as session_guard
from tenantd.ops.shutdown import shutdown_ctx
from tenantd.principal import PRINCIPAL
from tenantd.settings import SETTINGS, Settings
from tenantd.ui.routes import DOOR, install_pages
from tenantd.web.middlewares import envelope_routes
from tenantd.web.parser_log import ServerLog
from tenantd.web.routing import register
from tenantd.web.spec import CURRENT_ROUTE, WEBHOOK_BODY_LIMIT, Access, Routes


async def guard(request: web.Request, access: Access) -> None:
    """Server routes take an API key and nothing else; every other route the session guards
    (which never read an API key). A session that owes its account's second factor
    (requireMfa, no factor in its amr) is refused everywhere but the routes that let it step
    up, enrol a factor or leave (`mfa_exempt`): 403 REAUTH_REQUIRED or MFA_REQUIRED."""
    if access is Access.API_KEY:
        await require_api_key(request)
        return
    await session_guard(request, access)
    principal = request.get(PRINCIPAL)
    if principal is not None and principal.owes_factor and not request[CURRENT_ROUTE].mfa_exempt:
        await refuse_owed_factor(accounts_of(request.app), principal)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def note_writes(request: web.Request, response: web.StreamResponse) -> None:
    """Read-your-writes on replicas: a request that may have written (any method but GET,
    HEAD, OPTIONS) marks its caller (the user, or the API key) before its answer leaves, so
    that caller's next replica reads wait for the primary's position after it."""
    if request.method in SAFE_METHODS:
        return
    marks = request.app[DATABASE].marks
    principal = request.get(PRINCIPAL)
    if principal is not None:
        marks.note(principal.user_id)
    key = request.get(ACTING_KEY)
    if key is not None:
        marks.note(key.id)


def create_app(
    settings: Settings,
    database_url: str,
    *,
    extra_routes: list[Routes] | None = None,
    on_services: Callable[[web.Application], Awaitable[None]] | None = None,
) -> web.Application:
    app = web.Application(
        client_max_size=WEBHOOK_BODY_LIMIT,
        handler_args={"logger": ServerLog()},  # parser rejections: one rate-limited warning
    )
    app[SETTINGS] = settings

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        async with open_services(settings, database_url) as domains:
            app[DOMAINS] = domains
            app[DATABASE] = domains.db
            if on_services is not None:
                await on_services(app)
            yield

    # The shutdown watchdog first: its exit, which disarms it, runs after every other one.
    app.cleanup_ctx.append(shutdown_ctx)
    app.cleanup_ctx.append(services_ctx)
    app.cleanup_ctx.extend(HOOKS)
    pages = PAGE_ROUTES if install_pages(app, settings) else ()  # TENANTD_UI: pages, /static
    register(app, *ROUTES, *(extra_routes or []), *pages, guard=guard, pages=DOOR)
    envelope_routes(app)  # request id, error envelope, metrics, log line: every route
    if settings.database.replica_urls:
        app.on_response_prepare.append(note_writes)
    return app
