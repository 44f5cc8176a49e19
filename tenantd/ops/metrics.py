"""Prometheus metrics: one CollectorRegistry per application (so tests and several apps in
one process never share counters).

Counted in process: HTTP requests and latency by route template and status, sweeps, rate
limit refusals. Read from the database (so they agree across instances and need no
cooperation from the domains at run time): jobs by status, age of the oldest due job, last
successful sweep, and the counted gauges the domains declare (`CountedGauge`: notification
deliveries by channel and status, email suppressions by provider and reason), handed over by
tenantd/app. The SSE client count comes from the SSE hub of this process, when there is one.

A scrape never touches the database: one task per process reads the database figures every
TENANTD_METRICS_REFRESH_SECONDS on one pool connection, and every scrape serves the last
figures read. So a flood of scrapes costs no connection, and a scrape still answers when the
pool is exhausted. What that task reads is O(1) in table size:
- row counts are exact, kept on write by triggers (sql/0094): summing their rows reads a few
  rows per label pair, and the task folds them back into one row per label pair. Exact,
  because a count that moves by one is the signal (a failed job, a suppressed address);
  pg_class.reltuples would only estimate whole tables, not counts per status;
- the oldest due job is the first entry of the partial index of queued jobs;
- sweep times come from `sweep_runs`, one row per sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tenantd.db import Database
from tenantd.db.core import Conn
from tenantd.ops.queries import FOLD_LOCK, FOLD_SQL, STATE_QUERY, TRY_FOLD_LOCK
from tenantd.ops.request_counts import RequestCounts

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REFRESH_QUERY_TIMEOUT = 3.0  # one refresh, the wait for a pool connection included
DEFAULT_REFRESH_SECONDS = 15.0

# Methods outside this set share one label: a client cannot mint label sets.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "OTHER"
JOB_STATUSES = ("queued", "running", "failed")


@dataclass(frozen=True)
class CountedGauge:
    """A gauge over the exact counts a domain's triggers keep in metric_counts under `family`
    (sql/0094), one sample per label pair; `always` are label pairs shown even at zero."""

    family: str
    name: str
    help: str
    labels: tuple[str, str]
    always: tuple[tuple[str, str], ...] = ()


@dataclass
class StateSnapshot:
    """The database figures of one refresh."""

    jobs: dict[str, float] = field(default_factory=dict)
    oldest_queued_seconds: float = 0.0
    # Per counted family (deliveries, suppressions, ...): the count of each label pair.
    counts: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    sweep_success: dict[str, float] = field(default_factory=dict)
    read_at: float = 0.0  # time.time() of the read


async def fold_counts(conn: Conn) -> bool:
    """Fold the rows of metric_counts into one per key (skipped while another instance
    folds); return whether this call folded."""
    async with conn.transaction():
        locked = await conn.fetch_val(TRY_FOLD_LOCK, {"a": FOLD_LOCK[0], "b": FOLD_LOCK[1]})
        if locked:
            await conn.execute(FOLD_SQL)
    return bool(locked)


async def read_state(conn: Conn) -> StateSnapshot:
    """Read the database-backed figures (a few rows, whatever the size of the tables)."""
    rows = await conn.fetch_all(STATE_QUERY)
    snapshot = StateSnapshot(read_at=time.time())
    for row in rows:
        family, a, b, value = row["family"], row["a"], row["b"], float(row["value"])
        if family == "jobs":
            snapshot.jobs[a] = value
        elif family == "jobs_oldest_queued":
            snapshot.oldest_queued_seconds = value
        elif family == "sweep_success":
            snapshot.sweep_success[a] = value
        else:
            snapshot.counts.setdefault(family, {})[(a, b)] = value
    return snapshot


class StateCollector(Collector):
    """Yields the last database figures, and the live figures of this process."""

    def __init__(self, counted: tuple[CountedGauge, ...] = ()) -> None:
        self.counted = counted
        self.snapshot: StateSnapshot | None = None
        self.database_up = False
        self.pool: Callable[[], tuple[int, int]] | None = None  # (size, free)
        self.sse_clients: Callable[[], int] | None = None
        # (replicas up: 1 or 0 each, reads by outcome) when DATABASE_REPLICA_URLS is set
        self.replicas: Callable[[], tuple[list[bool], Mapping[str, int]]] | None = None

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "tenantd_database_up", "1 when the last metrics refresh read the database"
        )
        up.add_metric([], 1.0 if self.database_up else 0.0)
        yield up
        if self.pool is not None:
            size, free = self.pool()
            pool = GaugeMetricFamily(
                "tenantd_db_pool_connections", "Database pool connections", labels=["state"]
            )
            pool.add_metric(["used"], float(size - free))
            pool.add_metric(["free"], float(free))
            yield pool
        if self.replicas is not None:
            replicas_up, reads = self.replicas()
            replica_up = GaugeMetricFamily(
                "tenantd_db_replica_up",
                "1 while a replica (DATABASE_REPLICA_URLS, numbered from 0) is not found down",
                labels=["replica"],
            )
            for index, healthy in enumerate(replicas_up):
                replica_up.add_metric([str(index)], 1.0 if healthy else 0.0)
            yield replica_up
            answered = CounterMetricFamily(
                "tenantd_db_replica_reads",
                "Lag-tolerant reads: answered by a replica, or by the primary and why",
                labels=["outcome"],
            )
            for outcome in ("replica", "lagging", "failed", "no_replica"):
                answered.add_metric([outcome], float(reads.get(outcome, 0)))
            yield answered
        if self.sse_clients is not None:
            try:
                clients = float(self.sse_clients())
            except Exception:
                log.warning("metrics: SSE client count unavailable", exc_info=True)
            else:
                sse = GaugeMetricFamily(
                    "tenantd_sse_clients", "SSE clients connected to this instance"
                )
                sse.add_metric([], clients)
                yield sse
        snap = self.snapshot
        if snap is None:
            return
        age = GaugeMetricFamily(
            "tenantd_metrics_state_age_seconds",
            "Seconds since the database-derived figures below were read",
        )
        age.add_metric([], max(time.time() - snap.read_at, 0.0))
        yield age
        jobs = GaugeMetricFamily("tenantd_jobs", "Jobs in the durable queue", labels=["status"])
        for status in JOB_STATUSES:
            jobs.add_metric([status], snap.jobs.get(status, 0.0))
        yield jobs
        oldest = GaugeMetricFamily(
            "tenantd_jobs_oldest_queued_age_seconds", "Age of the oldest due queued job"
        )
        oldest.add_metric([], snap.oldest_queued_seconds)
        yield oldest
        for gauge in self.counted:
            counts = snap.counts.get(gauge.family, {})
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=list(gauge.labels))
            for a, b in sorted(set(gauge.always) | set(counts)):
                family.add_metric([a, b], counts.get((a, b), 0.0))
            yield family
        sweeps = GaugeMetricFamily(
            "tenantd_sweep_last_success_timestamp_seconds",
            "Unix time of the last successful run of each sweep (any instance)",
            labels=["sweep"],
        )
        for name, value in sorted(snap.sweep_success.items()):
            sweeps.add_metric([name], value)
        yield sweeps


class Metrics:
    """The registry of one application and the instruments the middleware and sweeps use."""

    def __init__(self, counted: tuple[CountedGauge, ...] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Requests and latency: plain totals read at scrape (no lock per request, issue 19).
        self.request_counts = RequestCounts(LATENCY_BUCKETS)
        self.registry.register(self.request_counts)
        self.in_progress = Gauge(
            "tenantd_http_requests_in_progress",
            "HTTP requests being handled (SSE streams included)",
            registry=self.registry,
        )
        # Counted by the middleware in plain ints, read at scrape: a gauge inc/dec takes a
        # lock twice per request (~5% of a cached /me, issue 19).
        self.requests_started = 0
        self.requests_finished = 0
        self.in_progress.set_function(lambda: self.requests_started - self.requests_finished)
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
        self.state = StateCollector(counted)
        self.registry.register(self.state)
        self.started = time.time()
        self._next_render: asyncio.Future[bytes] | None = None

    @property
    def sse_clients(self) -> Callable[[], int] | None:
        return self.state.sse_clients

    @sse_clients.setter
    def sse_clients(self, count: Callable[[], int] | None) -> None:
        self.state.sse_clients = count

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in KNOWN_METHODS else OTHER_METHOD
        self.request_counts.observe((method, route, status), seconds)

    def sweep_batch(self, sweep: str, table: str, rows: int) -> None:
        self.sweep_rows.labels(sweep, table).inc(rows)

    async def refresh(self, db: Database) -> None:
        """Read the database figures once, on one pool connection, within a bound; on failure
        the last figures stay (and tenantd_database_up says 0)."""
        try:
            async with asyncio.timeout(REFRESH_QUERY_TIMEOUT):
                async with db.connection() as conn:
                    await fold_counts(conn)
                    snapshot = await read_state(conn)
        except Exception as error:
            self.state.database_up = False
            log.warning("metrics: database figures could not be read: %r", error)
            return
        self.state.snapshot = snapshot
        self.state.database_up = True

    @contextlib.asynccontextmanager
    async def refreshing(self, db: Database, every: float) -> AsyncIterator[None]:
        """Read the figures now, then every `every` seconds in one task, until exit."""
        self.state.pool = lambda: (db.pool.size, db.pool.freesize)
        if db.replicas:
            self.state.replicas = lambda: (
                [not getattr(r.pool, "down", False) for r in db.replicas],
                db.replica_reads,
            )
        await self.refresh(db)
        stopping = asyncio.Event()

        async def loop() -> None:
            # The flag as well as the cancel: aiopg waits with asyncio.wait_for, which on
            # Python 3.11 can swallow a cancel that lands as a query completes.
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(every):
                        await stopping.wait()
                if not stopping.is_set():
                    await self.refresh(db)

        task = asyncio.get_running_loop().create_task(loop())
        try:
            yield
        finally:
            stopping.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def exposition(self) -> bytes:
        """The text of a scrape. Formatting is the costly part of a scrape (pure Python, a few
        µs per sample), so scrapes that arrive together share one rendering, made once the
        handlers already runnable have asked for it: each still sees every request answered
        before it arrived."""
        pending = self._next_render
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = self._next_render = loop.create_future()
            loop.call_soon(self._render_into, pending)
        return await asyncio.shield(pending)

    def _render_into(self, pending: asyncio.Future[bytes]) -> None:
        self._next_render = None
        try:
            pending.set_result(self.render())
        except Exception as error:
            pending.set_exception(error)


METRICS = web.AppKey("metrics", Metrics)
