"""The concrete services every view, job and CLI command is handed, and how they are opened
and closed (`open_services`): the kernel and each domain's service object, in the `Domains`
record."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from tenantd.accounts import mail as account_mail
from tenantd.accounts.domain import Accounts, HasAccounts
from tenantd.apikeys.domain import ApiKeys, HasApiKeys
from tenantd.app.plugins import JOB_KINDS
from tenantd.auth import jobs as auth_jobs
from tenantd.auth.domain import Auth, HasAuth
from tenantd.auth.oauth.client import OidcClient
from tenantd.bundle import DOMAINS, Domain, Kernel
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.directories.domain import Directories, HasDirectories
from tenantd.email.service import EmailService
from tenantd.identity.domain import HasIdentity, Identity
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.rotation import RotationBatcher
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
AUTH_KINDS = frozenset(kind.name for kind in auth_jobs.JOB_KINDS)
ACCOUNT_KINDS = frozenset(kind.name for kind in account_mail.JOB_KINDS)


@dataclass(eq=False)
class Domains(Domain):
    """Every domain's service object, built once per process (virtool's DataLayer): the app
    keeps it under DOMAINS, each domain reads its own through its accessor. The kernel's
    parts read through, as a domain object's do, for the composition root's hooks, the CLI
    and the sweeps."""

    identity: Identity
    accounts: Accounts
    auth: Auth
    webhooks: Webhooks
    apikeys: ApiKeys
    notifications: Notifications
    mfa: Mfa
    portal: Portal
    sso: Sso
    directories: Directories

    def owner(self, kind: JobKind) -> object:
        """The domain object a job kind runs with (this record for a kind of no domain's)."""
        if kind.name in WEBHOOK_KINDS:
            return self.webhooks
        if kind.name in NOTIFICATION_KINDS:
            return self.notifications
        if kind.name in MFA_KINDS:
            return self.mfa
        if kind.name in AUTH_KINDS:
            return self.auth
        if kind.name in ACCOUNT_KINDS:
            return self.accounts
        return self

    def bind_job(self, kind: JobKind) -> BoundKind:
        """Every job function runs with its domain's object (the queue never holds them)."""
        return kind.bind(self.owner(kind))

    def apply_notices(self, notices: list[str]) -> None:
        """Trigger notices of our own committed writes: every domain's cache hears them."""
        self.identity.principal_cache.apply_notices(notices)
        self.accounts.me_cache.apply_notices(notices)
        self.apikeys.cache.apply_notices(notices)
        self.notifications.inbox_cache.apply_notices(notices)


def _offers(
    domains: Domains,
) -> tuple[
    HasIdentity,
    HasAccounts,
    HasAuth,
    HasWebhooks,
    HasApiKeys,
    HasNotifications,
    HasMfa,
    HasPortal,
    HasSso,
    HasDirectories,
]:
    """mypy checks here that the record offers what each domain's accessor reads."""
    return (
        domains,
        domains,
        domains,
        domains,
        domains,
        domains,
        domains,
        domains,
        domains,
        domains,
    )


def domains_of(app: web.Application) -> Domains:
    """The record `create_app` stored under DOMAINS, for the composition root's own hooks
    (domains read their own object through their accessor)."""
    domains = app[DOMAINS]
    assert isinstance(domains, Domains)
    return domains


def build_services(
    settings: Settings,
    *,
    db: Database,
    http: aiohttp.ClientSession,
    email: EmailService,
    registry: EventRegistry,
) -> Domains:
    """The domains of these settings over an open pool and HTTP client."""
    identity_settings = settings.section(IdentitySettings)
    # The job kinds are bound to the domains once they exist (the queue never holds them).
    jobs = JobQueue(settings, bind=lambda kind: domains.bind_job(kind))
    kernel = Kernel(settings=settings, db=db, http=http, email=email, jobs=jobs)
    identity = Identity(
        kernel,
        keyring=Keyring(
            algorithm=identity_settings.access_token_alg,
            secret_key=settings.secret_key,
            audience=identity_settings.access_token_audience,
        ),
        rotation=RotationBatcher(db, identity_settings.refresh_token_ttl_days),
    )
    accounts = Accounts(kernel, identity=identity)
    oidc = OidcClient(http)  # one discovery and key cache, for social sign-in and SSO
    domains = Domains(
        kernel=kernel,
        identity=identity,
        accounts=accounts,
        auth=Auth(kernel, identity=identity, accounts=accounts, oidc=oidc),
        webhooks=Webhooks(kernel, sender=WebhookSender(settings)),
        apikeys=ApiKeys(kernel),
        notifications=Notifications(kernel, identity=identity, registry=registry),
        mfa=Mfa(kernel, identity=identity),
        portal=Portal(kernel),
        sso=Sso(kernel, identity=identity, oidc=oidc),
        directories=Directories(kernel),
    )
    for kind in JOB_KINDS:
        jobs.register(kind)
    return domains


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
async def open_services(settings: Settings, database_url: str) -> AsyncIterator[Domains]:
    """Open the pool and the shared HTTP client; close them in reverse order."""
    registry = event_registry(settings)
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
        domains = build_services(settings, db=db, http=http, email=email, registry=registry)
        # Trigger notices seen by our own writes invalidate the cache before we answer.
        db.notice_sink = domains.apply_notices
        if db.replicas:
            # A changed inbox (our commit's notice, or another instance's announcement after
            # its commit) is a write its user must see on a replica.
            domains.notifications.inbox_cache.on_change = db.marks.note
        # The stored event types, for the CLI too (the app's feed then keeps them current).
        await load_stored_once(db, registry)
        try:
            yield domains
        finally:
            await domains.jobs.drain(INLINE_DRAIN_SECONDS)
            await domains.webhooks.sender.close()
    finally:
        await http.close()
        await db.close()
