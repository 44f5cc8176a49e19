"""The concrete services bundle every view, job and CLI command is handed, and how it is
opened and closed (`open_services`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from tenantd.apikeys.cache import ApiKeyCache
from tenantd.app.plugins import JOB_KINDS
from tenantd.cache.context import ContextCache
from tenantd.cache.keyring import Keyring
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.email.service import EmailService
from tenantd.email.templates import brand_of, use_brand
from tenantd.jobs.kinds import BoundKind, JobKind
from tenantd.jobs.queue import JobQueue
from tenantd.notifications import tenancy
from tenantd.notifications.declared import load_catalog
from tenantd.notifications.definitions import load_stored_once
from tenantd.notifications.registry import EventRegistry, load_registry
from tenantd.settings import Settings
from tenantd.webhooks.delivery import WebhookSender

log = logging.getLogger(__name__)

INLINE_DRAIN_SECONDS = 10.0  # in-process jobs (queues off) get this long at shutdown


@dataclass
class AppServices:
    settings: Settings
    db: Database
    http: aiohttp.ClientSession
    email: EmailService
    # Notification event types: the built-in ones (TENANTD_BUILTIN_NOTIFICATIONS), then
    # TENANTD_EVENT_MODULES (loaded before anything opens).
    registry: EventRegistry = field(default_factory=EventRegistry)
    # Resolved request contexts (token -> principal, /me bodies); off until its listener runs.
    context_cache: ContextCache = field(default_factory=ContextCache)
    # Verified server API keys (issue 15), invalidated like the context cache.
    api_key_cache: ApiKeyCache = field(default_factory=ApiKeyCache)
    # The one enqueue call (after commit, QUEUES_ENABLED or in this process), its kinds bound
    # to these services.
    jobs: JobQueue = field(default=None)  # type: ignore[assignment]
    # Access-token signing and verification keys (filled and kept fresh by the keyring hook).
    keyring: Keyring = field(default=None)  # type: ignore[assignment]
    # Outbound webhook deliveries: one HTTP session (no redirects, metadata refused).
    webhook_sender: WebhookSender = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.jobs is None:
            self.jobs = JobQueue(self.settings, JOB_KINDS, bind=self.bind_job)
        if self.keyring is None:
            self.keyring = Keyring(
                algorithm=self.settings.access_token_alg,
                secret_key=self.settings.secret_key,
                audience=self.settings.access_token_audience,
            )
        if self.webhook_sender is None:
            self.webhook_sender = WebhookSender(self.settings)

    def bind_job(self, kind: JobKind) -> BoundKind:
        """Every job function runs with these services (the queue never holds them)."""
        return kind.bind(self)

    def apply_notices(self, notices: list[str]) -> None:
        """Trigger notices of our own committed writes: every in-process cache hears them."""
        self.context_cache.apply_notices(notices)
        self.api_key_cache.apply_notices(notices)


def event_registry(settings: Settings) -> EventRegistry:
    """The deployment's event types: the Python modules', then the catalog file's. A bad
    module or catalog entry fails start-up (RegistryError naming it)."""
    registry = load_registry(tenancy.event_modules(settings))
    load_catalog(registry, settings.event_catalog)
    return registry


@contextlib.asynccontextmanager
async def open_services(settings: Settings, database_url: str) -> AsyncIterator[AppServices]:
    """Open the pool and the shared HTTP client; close them in reverse order."""
    registry = event_registry(settings)
    use_brand(brand_of(settings))  # every HTML mail's layout shows the pages' brand
    db = await create_database(
        url_to_dsn(database_url), minsize=settings.db_pool_min, maxsize=settings.db_pool_max
    )
    timeout = aiohttp.ClientTimeout(total=15, connect=5)
    http = aiohttp.ClientSession(timeout=timeout)
    try:
        email = EmailService.from_settings(settings, db=db, http=http)
        services = AppServices(settings=settings, db=db, http=http, email=email, registry=registry)
        # Trigger notices seen by our own writes invalidate the cache before we answer.
        db.notice_sink = services.apply_notices
        # The stored event types, for the CLI too (the app's feed then keeps them current).
        await load_stored_once(db, registry)
        try:
            yield services
        finally:
            await services.jobs.drain(INLINE_DRAIN_SECONDS)
            await services.webhook_sender.close()
    finally:
        await http.close()
        await db.close()
