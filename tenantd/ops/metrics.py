"""Prometheus metrics: one CollectorRegistry per application (so tests and several apps in
one process never share counters).

Counted in process: HTTP requests and latency by route template and status, sweeps, rate
limit refusals. Read from the database at scrape time (so they agree across instances and
need no cooperation from the domains): jobs by status, notification deliveries by channel
and status, email suppressions by provider and reason, last successful sweep. The SSE
client count comes from the SSE hub of this process, when there is one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tenantd.db import Database
from tenantd.ops.queries import STATE_QUERY

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SCRAPE_QUERY_TIMEOUT = 3.0

# Methods outside this set share one label: a client cannot mint label sets.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "OTHER"
JOB_STATUSES = ("queued", "running", "failed")
CHANNELS = ("in_app", "email", "sse", "web_push")
DELIVERY_STATUSES = ("pending", "sent", "failed", "suppressed")


@dataclass
class StateSnapshot:
    database_up: bool = False
    jobs: dict[str, float] = field(default_factory=dict)
    oldest_queued_seconds: float = 0.0
    deliveries: dict[tuple[str, str], float] = field(default_factory=dict)
    suppressions: dict[tuple[str, str], float] = field(default_factory=dict)
    sweep_success: dict[str, float] = field(default_factory=dict)
    pool_size: int = 0
    pool_free: int = 0
    sse_clients: int | None = None


async def read_state(db: Database) -> StateSnapshot:
    """Read the database-backed gauges in one statement (bounded by a timeout)."""
    snapshot = StateSnapshot(pool_size=db.pool.size, pool_free=db.pool.freesize)
    try:
        async with asyncio.timeout(SCRAPE_QUERY_TIMEOUT):
            rows = await db.fetch_all(STATE_QUERY)
    except Exception:
        log.warning("metrics: database state could not be read", exc_info=True)
        return snapshot
    snapshot.database_up = True
    for row in rows:
        family, a, b, value = row["family"], row["a"], row["b"], float(row["value"])
        if family == "jobs":
            snapshot.jobs[a] = value
        elif family == "jobs_oldest_queued":
            snapshot.oldest_queued_seconds = value
        elif family == "deliveries":
            snapshot.deliveries[(a, b)] = value
        elif family == "suppressions":
            snapshot.suppressions[(a, b)] = value
        elif family == "sweep_success":
            snapshot.sweep_success[a] = value
    return snapshot


class StateCollector(Collector):
    """Yields the last snapshot taken by `Metrics.refresh` (taken right before a scrape)."""

    def __init__(self) -> None:
        self.snapshot = StateSnapshot()

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        up = GaugeMetricFamily("tenantd_database_up", "1 when the database answered the scrape")
        up.add_metric([], 1.0 if snap.database_up else 0.0)
        yield up
        pool = GaugeMetricFamily(
            "tenantd_db_pool_connections", "Database pool connections", labels=["state"]
        )
        pool.add_metric(["used"], float(snap.pool_size - snap.pool_free))
        pool.add_metric(["free"], float(snap.pool_free))
        yield pool
        if not snap.database_up:
            return
        jobs = GaugeMetricFamily("tenantd_jobs", "Jobs in the durable queue", labels=["status"])
        for status in JOB_STATUSES:
            jobs.add_metric([status], snap.jobs.get(status, 0.0))
        yield jobs
        oldest = GaugeMetricFamily(
            "tenantd_jobs_oldest_queued_age_seconds", "Age of the oldest due queued job"
        )
        oldest.add_metric([], snap.oldest_queued_seconds)
        yield oldest
        deliveries = GaugeMetricFamily(
            "tenantd_notification_deliveries",
            "Notification delivery rows by channel and status",
            labels=["channel", "status"],
        )
        keys = {(c, s) for c in CHANNELS for s in DELIVERY_STATUSES} | set(snap.deliveries)
        for channel, status in sorted(keys):
            deliveries.add_metric([channel, status], snap.deliveries.get((channel, status), 0.0))
        yield deliveries
        suppressions = GaugeMetricFamily(
            "tenantd_email_suppressions",
            "Suppressed email addresses by provider and reason",
            labels=["provider", "reason"],
        )
        for (provider, reason), value in sorted(snap.suppressions.items()):
            suppressions.add_metric([provider, reason], value)
        yield suppressions
        sweeps = GaugeMetricFamily(
            "tenantd_sweep_last_success_timestamp_seconds",
            "Unix time of the last successful run of each sweep (any instance)",
            labels=["sweep"],
        )
        for name, value in sorted(snap.sweep_success.items()):
            sweeps.add_metric([name], value)
        yield sweeps
        if snap.sse_clients is not None:
            sse = GaugeMetricFamily("tenantd_sse_clients", "SSE clients connected to this instance")
            sse.add_metric([], float(snap.sse_clients))
            yield sse


class Metrics:
    """The registry of one application and the instruments the middleware and sweeps use."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tenantd_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tenantd_http_request_duration_seconds",
            "HTTP request latency, by method, route template and status",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_progress = Gauge(
            "tenantd_http_requests_in_progress",
            "HTTP requests being handled (SSE streams included)",
            registry=self.registry,
        )
        self.sweep_runs = Counter(
            "tenantd_sweep_runs",
            "Sweep runs started by this instance, by outcome",
            ["sweep", "status"],
            registry=self.registry,
        )
        self.sweep_rows = Counter(
            "tenantd_sweep_rows",
            "Rows deleted or updated by sweeps of this instance",
            ["sweep", "table"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "tenantd_rate_limited_requests",
            "Requests refused with 429, by scope and counter",
            ["scope", "dimension"],
            registry=self.registry,
        )
        self.state = StateCollector()
        self.registry.register(self.state)
        self.sse_clients: Callable[[], int] | None = None
        self.started = time.time()
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method if method in KNOWN_METHODS else OTHER_METHOD, route, status)
        children = self._request_children.get(key)
        if children is None:
            # labels() costs ~4 µs a request (tuple, lock, dict); the children never change.
            labels = (key[0], route, str(status))
            children = (self.requests.labels(*labels), self.latency.labels(*labels))
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def sweep_batch(self, sweep: str, table: str, rows: int) -> None:
        self.sweep_rows.labels(sweep, table).inc(rows)

    async def refresh(self, db: Database) -> None:
        snapshot = await read_state(db)
        if self.sse_clients is not None:
            try:
                snapshot.sse_clients = int(self.sse_clients())
            except Exception:
                log.warning("metrics: SSE client count unavailable", exc_info=True)
        self.state.snapshot = snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)


METRICS = web.AppKey("metrics", Metrics)
