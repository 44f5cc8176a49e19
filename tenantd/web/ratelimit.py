"""Client address and the per-route abuse limit of a request (the counters live in ops)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.errors import RateLimited
from tenantd.ops.config import ops_config
from tenantd.ops.metrics import METRICS
from tenantd.ops.ratelimit import check, client_ip
from tenantd.settings import SETTINGS


def request_ip(request: web.Request) -> str | None:
    """The caller's address (X-Forwarded-For is believed only from TENANTD_TRUSTED_PROXIES)."""
    config = ops_config(request.app[SETTINGS])
    return client_ip(request.remote, request.headers.get("X-Forwarded-For"), config.trusted_proxies)


async def rate_limit_request(
    request: web.Request, scope: str, body: Any, *, session: str | None = None
) -> None:
    """Count this request against `scope` per IP, per body email and per `session` (a
    session family id the caller vouches for); 429 when over."""
    settings = request.app[SETTINGS]
    config = ops_config(settings)
    if not config.rate_limit_enabled:
        return
    email = getattr(body, "email", None) if body is not None else None
    async with request.app[DATABASE].connection() as conn:
        verdict = await check(
            conn,
            config,
            secret_key=settings.secret_key,
            scope=scope,
            ip=request_ip(request),
            email=str(email) if email else None,
            session=session,
        )
    if not verdict.allowed:
        metrics = request.app.get(METRICS)
        if metrics is not None:
            metrics.rate_limited.labels(scope, verdict.dimension or "unknown").inc()
        raise RateLimited(verdict.retry_after)
