"""The concrete services every view, job and CLI command is handed, and how they are opened
and closed (`open_services`): the kernel, each moved domain's service object in the `Domains`
record, and the older bundle (`AppServices`) the domains not yet moved still see through
their Protocols."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from tenantd.accounts.me import MeCache
from tenantd.apikeys.domain import ApiKeys, HasApiKeys
from tenantd.app.plugins import JOB_KINDS
from tenantd.bundle import Kernel
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.directories.domain import Directories, HasDirectories
from tenantd.email.service import EmailService
from tenantd.email.templates import brand_of, use_brand
from tenantd.identity.bundle import SERVICES
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.identity.settings import IdentitySettings
from tenantd.jobs.kinds import BoundKind, JobKind
from tenantd.jobs.queue import JobQueue
from tenantd.mfa import mail as mfa_mail
from tenantd.mfa import sensitive
from tenantd.mfa.domain import HasMfa, Mfa
from tenantd.notifications import jobs as notification_jobs
from tenantd.notifications import tenancy
from tenantd.notifications.declared import load_catalog
from tenantd.notifications.definitions import load_stored_once
from tenantd.notifications.domain import HasNotifications, Notifications
from tenantd.notifications.registry import EventRegistry, load_registry
from tenantd.notifications.settings import NotificationSettings
from tenantd.portal.domain import HasPortal, Portal
from tenantd.settings import Settings
from tenantd.sso.domain import HasSso, Sso
from tenantd.suppression import service as suppression
from tenantd.suppression.webhooks import check_settings as check_webhook_settings
from tenantd.webhooks import jobs as webhook_jobs
from tenantd.webhooks.domain import HasWebhooks, Webhooks
from tenantd.webhooks.sender import WebhookSender

log = logging.getLogger(__name__)

INLINE_DRAIN_SECONDS = 10.0  # in-process jobs (queues off) get this long at shutdown


WEBHOOK_KINDS = frozenset(kind.name for kind in webhook_jobs.JOB_KINDS)
NOTIFICATION_KINDS = frozenset(kind.name for kind in notification_jobs.JOB_KINDS)
MFA_KINDS = frozenset(kind.name for kind in (*mfa_mail.JOB_KINDS, *sensitive.JOB_KINDS))


@dataclass(frozen=True, eq=False)
class Domains:
    """Every domain's service object, built once per process (virtool's DataLayer): the app
    keeps it under DOMAINS, each domain reads its own through its accessor."""

    kernel: Kernel
    webhooks: Webhooks
    apikeys: ApiKeys
    notifications: Notifications
    mfa: Mfa
    portal: Portal
    sso: Sso
    directories: Directories

    def owner(self, kind: JobKind) -> object | None:
        """The domain object a job kind runs with (None: a kind of a domain not yet moved)."""
        if kind.name in WEBHOOK_KINDS:
            return self.webhooks
        if kind.name in NOTIFICATION_KINDS:
            return self.notifications
        if kind.name in MFA_KINDS:
            return self.mfa
        return None

    def apply_notices(self, notices: list[str]) -> None:
        """Trigger notices of our own committed writes: every domain's cache hears them."""
        self.apikeys.cache.apply_notices(notices)
        self.notifications.inbox_cache.apply_notices(notices)


def _offers(
    domains: Domains,
) -> tuple[HasWebhooks, HasApiKeys, HasNotifications, HasMfa, HasPortal, HasSso, HasDirectories]:
    """mypy checks here that the record offers what each domain's accessor reads."""
    return (domains, domains, domains, domains, domains, domains, domains)


@dataclass
class AppServices:
    """Every long-lived object of one process, built once (`build_services`); each domain
    sees it through its own Protocol (`tenantd.bundle.Services` and its extensions)."""

    settings: Settings
    db: Database
    http: aiohttp.ClientSession
    email: EmailService
    # Durable job queue switch (QUEUES_ENABLED) and this process's inline job tasks.
    jobs: JobQueue
    # Access-token signing and verification keys (filled and kept fresh by the keyring hook).
    keyring: Keyring
    # In-process caches, each off until its listener runs, each its domain's: resolved access
    # tokens (identity), /me bodies (accounts).
    principal_cache: PrincipalCache = field(default_factory=PrincipalCache)
    me_cache: MeCache = field(default_factory=MeCache)
    # The domains moved to their own service objects (set by `build_services`).
    domains: Domains = field(init=False)

    def bind_job(self, kind: JobKind) -> BoundKind:
        """Every job function runs with its domain's object, or these services for a domain
        not yet moved (the queue never holds them)."""
        owner = self.domains.owner(kind)
        return kind.bind(self if owner is None else owner)

    def apply_notices(self, notices: list[str]) -> None:
        """Trigger notices of our own committed writes: every in-process cache hears them."""
        self.principal_cache.apply_notices(notices)
        self.me_cache.apply_notices(notices)
        self.domains.apply_notices(notices)


def app_services(app: web.Application) -> AppServices:
    """The concrete bundle `create_app` stored under SERVICES, for the composition root's own
    hooks (views and domains see it through their Protocol's key)."""
    services = app[SERVICES]
    assert isinstance(services, AppServices)
    return services


def build_services(
    settings: Settings,
    *,
    db: Database,
    http: aiohttp.ClientSession,
    email: EmailService,
    registry: EventRegistry,
) -> AppServices:
    """The services of these settings over an open pool and HTTP client."""
    identity = settings.section(IdentitySettings)
    # The job kinds are bound to the services once they exist (the queue never holds them).
    jobs = JobQueue(settings, bind=lambda kind: services.bind_job(kind))
    services = AppServices(
        settings=settings,
        db=db,
        http=http,
        email=email,
        jobs=jobs,
        keyring=Keyring(
            algorithm=identity.access_token_alg,
            secret_key=settings.secret_key,
            audience=identity.access_token_audience,
        ),
    )
    kernel = Kernel(settings=settings, db=db, http=http, email=email, jobs=jobs)
    services.domains = Domains(
        kernel=kernel,
        webhooks=Webhooks(kernel, sender=WebhookSender(settings)),
        apikeys=ApiKeys(kernel),
        notifications=Notifications(kernel, identity=services, registry=registry),
        mfa=Mfa(kernel, identity=services),
        portal=Portal(kernel),
        sso=Sso(kernel, identity=services),
        directories=Directories(kernel),
    )
    for kind in JOB_KINDS:
        jobs.register(kind)
    return services


def event_registry(settings: Settings) -> EventRegistry:
    """The deployment's event types: the Python modules', then the catalog file's. A bad
    module or catalog entry fails start-up (RegistryError naming it)."""
    registry = load_registry(tenancy.event_modules(settings))
    load_catalog(registry, settings.section(NotificationSettings).event_catalog)
    return registry


async def attach_replicas(db: Database, settings: Settings) -> None:
    """DATABASE_REPLICA_URLS: one pool each, opened empty (a replica that is down at start-up
    costs nothing: the primary answers until it is back)."""
    replicas = [
        await create_database(url_to_dsn(url), minsize=0, maxsize=settings.database.pool_max)
        for url in settings.database.replica_urls
    ]
    if replicas:
        db.use_replicas(replicas, wait=settings.database.replica_wait_ms / 1000)


@contextlib.asynccontextmanager
async def open_services(settings: Settings, database_url: str) -> AsyncIterator[AppServices]:
    """Open the pool and the shared HTTP client; close them in reverse order."""
    registry = event_registry(settings)
    use_brand(brand_of(settings))  # every HTML mail's layout shows the pages' brand
    db = await create_database(
        url_to_dsn(database_url),
        minsize=settings.database.pool_min,
        maxsize=settings.database.pool_max,
    )
    await attach_replicas(db, settings)
    timeout = aiohttp.ClientTimeout(total=15, connect=5)
    http = aiohttp.ClientSession(timeout=timeout)
    try:
        check_webhook_settings(settings)
        email = EmailService.from_settings(settings, db=db, http=http, blocklist=suppression)
        services = build_services(settings, db=db, http=http, email=email, registry=registry)
        # Trigger notices seen by our own writes invalidate the cache before we answer.
        db.notice_sink = services.apply_notices
        if db.replicas:
            # A changed inbox (our commit's notice, or another instance's announcement after
            # its commit) is a write its user must see on a replica.
            services.domains.notifications.inbox_cache.on_change = db.marks.note
        # The stored event types, for the CLI too (the app's feed then keeps them current).
        await load_stored_once(db, registry)
        try:
            yield services
        finally:
            await services.jobs.drain(INLINE_DRAIN_SECONDS)
            await services.domains.webhooks.sender.close()
    finally:
        await http.close()
        await db.close()
