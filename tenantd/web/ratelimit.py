"""Client address and the per-route abuse limit of a request (the counters live in ops)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.errors import RateLimited
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.metrics import METRICS
from tenantd.ops.ratelimit import (
    Counter,
    Verdict,
    client_ip,
    counters_for,
    device_budget_key,
    email_key,
    hit,
)
from tenantd.settings import SETTINGS


def request_ip(request: web.Request) -> str | None:
    """The caller's address (X-Forwarded-For is believed only from TENANTD_TRUSTED_PROXIES)."""
    trusted = request.app[SETTINGS].section(RateLimitSettings).trusted_proxies
    return client_ip(request.remote, request.headers.get("X-Forwarded-For"), trusted)


DEVICE_COOKIE = "device_id"  # set at sign-in (tenantd/identity/cookies.py)
DEVICE_BUDGET_SCOPES = frozenset({"login"})  # where a known browser has a budget of its own


def rate_limit_counters(
    request: web.Request, scope: str, *, email: str | None = None, session: str | None = None
) -> list[Counter]:
    """The counters this request moves for `scope` (per IP, per email or per known browser,
    per `session`); none when rate limiting is off. For a caller that counts them in a
    statement of its own (the batched refresh); `rate_limit_request` counts them alone."""
    settings = request.app[SETTINGS]
    limits = settings.section(RateLimitSettings)
    if not limits.enabled:
        return []
    device = None
    if scope in DEVICE_BUDGET_SCOPES:
        device = device_budget_key(settings.secret_key, request.cookies.get(DEVICE_COOKIE), email)
    return counters_for(
        scope,
        limits.rule(scope),
        ip=request_ip(request),
        email_hash=email_key(settings.secret_key, email) if email else None,
        session=session,
        device=device,
    )


def refused(request: web.Request, scope: str, verdict: Verdict) -> RateLimited:
    """The 429 for a request over a limit of `scope`, counted in the metrics."""
    metrics = request.app.get(METRICS)
    if metrics is not None:
        metrics.rate_limited.labels(scope, verdict.dimension or "unknown").inc()
    return RateLimited(verdict.retry_after)


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """A request's limits of one scope, for a service that counts them in a statement of its
    own (the batched refresh): the counters (per session when the caller vouches for one),
    and the 429 of a verdict over one, counted in the metrics."""

    request: web.Request
    scope: str

    def counters(self, session: str | None = None) -> list[Counter]:
        return rate_limit_counters(self.request, self.scope, session=session)

    def refused(self, verdict: Verdict) -> RateLimited:
        return refused(self.request, self.scope, verdict)


async def rate_limit_request(
    request: web.Request,
    scope: str,
    body: Any,
    *,
    session: str | None = None,
    email: str | None = None,
) -> None:
    """Count this request against `scope` per IP, per email (`email`, else the body's) and
    per `session` (a session family id the caller vouches for); 429 when over."""
    if email is None and body is not None:
        found = getattr(body, "email", None)
        email = str(found) if found else None
    counters = rate_limit_counters(request, scope, email=email or None, session=session)
    if not counters:
        return
    async with request.app[DATABASE].connection() as conn:
        verdict = await hit(conn, counters)
    if not verdict.allowed:
        raise refused(request, scope, verdict)
