"""cleanup_ctx hooks that tie the kernel's engines to this application's domains, in the
order they start (they close in reverse)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from tenantd.app.bundle import domains_of
from tenantd.app.bus import RELAY, bus_relay, make_bus
from tenantd.app.plugins import METRIC_GAUGES, SWEEPS
from tenantd.auth import breach
from tenantd.cache.invalidation import CHANNEL, live_while_confirmed
from tenantd.db import DATABASE
from tenantd.identity.keys.feed import fed
from tenantd.identity.revocations import mirrored
from tenantd.jobs.runner import running
from tenantd.jobs.settings import JobSettings
from tenantd.notifications import definitions, tenancy
from tenantd.notifications.channels.sse.feed import FEED_KEY, sse_ctx
from tenantd.notifications.settings import NotificationSettings
from tenantd.notifications.tenancy.feed import tenancy_feed
from tenantd.ops.config import ProcessSettings, SchedulerSettings
from tenantd.ops.instances import Instance, heartbeating, switches
from tenantd.ops.metrics import METRICS, Metrics
from tenantd.ops.scheduler import SCHEDULER, SweepScheduler
from tenantd.pubsub import PUBSUB
from tenantd.settings import SETTINGS
from tenantd.webhooks.relay import WebhookCollector, relaying
from tenantd.webhooks.sealing import seal_clear_secrets

Hook = Callable[[web.Application], AsyncIterator[None]]


async def pubsub_ctx(app: web.Application) -> AsyncIterator[None]:
    """The process's bus (TENANTD_BUS): its one subscriber connection (SSE feed, caches),
    and the relay that publishes what committed transactions announced (db/relay.py)."""
    db = app[DATABASE]
    settings = app[SETTINGS].bus
    hub = make_bus(settings, db)
    await hub.start()
    app[PUBSUB] = hub
    try:
        async with bus_relay(settings, hub, db) as relay:
            app[RELAY] = relay
            yield
    finally:
        await hub.close()


@asynccontextmanager
async def _fed_from_hub(app: web.Application, cache: Any) -> AsyncIterator[None]:
    """Feed a NOTIFY-invalidated cache from the pub/sub hub; it serves only while the hub's
    round trip and the relay's check are both within the staleness bound.

    A reconnect may have missed invalidations, so the hub's gap signal flushes everything.
    """
    hub = app[PUBSUB]
    subscription = await hub.subscribe(
        CHANNEL, lambda _channel, payload: cache.apply(payload), on_gap=cache.flush
    )
    cache.flush()
    cache.live = live_while_confirmed(hub, relay=app[RELAY])
    cache.enabled = True
    try:
        yield
    finally:
        cache.enabled = False
        cache.flush()
        await hub.unsubscribe(subscription)


async def caches_ctx(app: web.Application) -> AsyncIterator[None]:
    """The domains' request caches (principals, /me bodies, inbox answers), each fed from the
    pub/sub hub, and the principal cache's mirror of revocations (loaded once the cache hears
    every announcement)."""
    domains = domains_of(app)
    principals = domains.identity.principal_cache
    async with (
        _fed_from_hub(app, principals),
        _fed_from_hub(app, domains.accounts.me_cache),
        _fed_from_hub(app, domains.notifications.inbox_cache),
        mirrored(domains.db, principals.revocations, app[PUBSUB]),
    ):
        yield


async def keyring_ctx(app: web.Application) -> AsyncIterator[None]:
    """The access-token keys: a signing key exists (created by the first instance), the
    keyring holds them, and every change of signing_keys reloads it (NOTIFY, gap, timer)."""
    domains = domains_of(app)
    async with fed(domains.db, domains.settings, domains.identity.keyring, app[PUBSUB]):
        yield


async def event_definitions_ctx(app: web.Application) -> AsyncIterator[None]:
    """The declarative event types stored over HTTP: loaded now, and every change reloaded
    (NOTIFY, gap, timer) so each instance uses a new definition within seconds."""
    domains = domains_of(app)
    async with definitions.fed(domains.db, domains.notifications.registry, app[PUBSUB]):
        yield


async def api_key_cache_ctx(app: web.Application) -> AsyncIterator[None]:
    """The API-key cache, fed from the same channel and listener as the other caches."""
    async with _fed_from_hub(app, domains_of(app).apikeys.cache):
        yield


def _sse_client_count(app: web.Application) -> Callable[[], int]:
    """How many SSE streams this process serves (looked up at scrape time: the SSE hook
    starts after the metrics hook)."""

    def count() -> int:
        feed = app.get(FEED_KEY)
        return feed.stream_count if feed is not None else 0

    return count


async def metrics_ctx(app: web.Application) -> AsyncIterator[None]:
    """This application's metrics registry and the one task per process that refreshes its
    database figures (it also folds metric_counts, so it runs even with /metrics off)."""
    registry = Metrics(counted=METRIC_GAUGES)
    registry.registry.register(breach.CHECK_ERRORS)  # process-wide: sign-up lookups
    app[METRICS] = registry
    settings = app[SETTINGS]
    if settings.section(NotificationSettings).notifications_sse_enabled:
        registry.sse_clients = _sse_client_count(app)
    async with registry.refreshing(
        domains_of(app).db, settings.section(ProcessSettings).metrics_refresh_seconds
    ):
        yield


async def job_runner_ctx(app: web.Application) -> AsyncIterator[None]:
    """Run the worker pool in this process when QUEUES_ENABLED is on (with it off, for the
    durable kinds only, e.g. webhook deliveries)."""
    domains = domains_of(app)
    durable = any(kind.durable for kind in domains.jobs.kinds.values())
    if not domains.settings.section(JobSettings).queues_enabled and not durable:
        yield
        return
    async with running(domains):
        yield


async def scheduler_ctx(app: web.Application) -> AsyncIterator[None]:
    """Run the sweep scheduler inside `tenantd serve` unless disabled."""
    config = app[SETTINGS].section(SchedulerSettings)
    if not config.enabled:
        yield
        return
    scheduler = SweepScheduler(domains_of(app), config, app.get(METRICS), sweeps=SWEEPS)
    scheduler.start()
    app[SCHEDULER] = scheduler

    async def stop_ticking(_app: web.Application) -> None:
        # No new sweep starts while requests and jobs drain; a running one stops at its
        # next batch boundary.
        scheduler.stopping.set()

    app.on_shutdown.append(stop_ticking)
    try:
        yield
    finally:
        await scheduler.stop()


async def outbox_relay_ctx(app: web.Application) -> AsyncIterator[None]:
    """Number committed outbox events and fan them out to webhook endpoints (and the
    built-in tenancy notifications when on). Endpoint secrets still in clear (written before
    they were sealed) are sealed first."""
    domains = domains_of(app)
    await seal_clear_secrets(domains.db, domains.settings)
    metrics = app.get(METRICS)
    if metrics is not None:
        metrics.registry.register(WebhookCollector(domains.webhooks.sender))
    # The built-in tenancy notifications are told in the sequencing transaction too.
    others = [tenancy_feed(domains.notifications)] if tenancy.enabled(app[SETTINGS]) else []
    async with relaying(domains.webhooks, others):
        yield


def instance_hook(listen: str | None) -> Hook:
    """`tenantd serve`'s row of `instances`: what this server runs with (switches, event
    types, version), refreshed every TENANTD_INSTANCE_HEARTBEAT_SECONDS, deleted at a clean
    shutdown (ops/instances.py). Only the server has it: `tenantd status` lists servers."""

    async def instance_ctx(app: web.Application) -> AsyncIterator[None]:
        domains = domains_of(app)
        settings = app[SETTINGS]

        def describe() -> tuple[dict[str, Any], list[str]]:
            events = domains.notifications.registry.events()
            declared = sum(1 for event in events if event.declared is not None)
            return switches(settings, declared), [event.type for event in events]

        instance = Instance(listen, describe)
        interval = settings.section(ProcessSettings).instance_heartbeat_seconds
        async with heartbeating(domains.db, instance, interval):
            yield

    return instance_ctx


HOOKS: tuple[Hook, ...] = (
    pubsub_ctx,
    caches_ctx,
    keyring_ctx,
    event_definitions_ctx,
    api_key_cache_ctx,
    metrics_ctx,
    job_runner_ctx,
    outbox_relay_ctx,
    scheduler_ctx,
    sse_ctx,
)
