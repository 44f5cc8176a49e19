"""The web side of the ops domain: client address and the per-route abuse limit."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd import appkeys
from tenantd.errors import RateLimited
from tenantd.ops.config import ops_config
from tenantd.ops.ratelimit import check, client_ip


def request_ip(request: web.Request) -> str | None:
    """The caller's address (X-Forwarded-For is believed only from TENANTD_TRUSTED_PROXIES)."""
    config = ops_config(request.app[appkeys.settings])
    return client_ip(request.remote, request.headers.get("X-Forwarded-For"), config.trusted_proxies)


async def rate_limit_request(
    request: web.Request, scope: str, body: Any, *, session: str | None = None
) -> None:
    """Count this request against `scope` per IP, per body email and per `session` (a
    session family id the caller vouches for); 429 when over."""
    services = request.app[appkeys.services]
    config = ops_config(services.settings)
    if not config.rate_limit_enabled:
        return
    email = getattr(body, "email", None) if body is not None else None
    async with services.db.connection() as conn:
        verdict = await check(
            conn,
            config,
            secret_key=services.settings.secret_key,
            scope=scope,
            ip=request_ip(request),
            email=str(email) if email else None,
            session=session,
        )
    if not verdict.allowed:
        metrics = request.app.get(appkeys.metrics)
        if metrics is not None:
            metrics.rate_limited.labels(scope, verdict.dimension or "unknown").inc()
        raise RateLimited(verdict.retry_after)
