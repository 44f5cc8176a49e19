"""The kernel's long-lived resources (`Kernel`), the base of every domain's service object
(`Domain`, built once by tenantd/app/ into its `Domains` record under `DOMAINS`) and the
`Services` Protocol: what a function that needs only the kernel takes, which every domain
object is. (A domain's `service.py` is something else: its rules.) See
docs/architecture.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from tenantd.db import Database
from tenantd.email.service import EmailService
from tenantd.jobs.queue import JobQueue
from tenantd.settings import Settings


class Services(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def db(self) -> Database: ...

    @property
    def http(self) -> aiohttp.ClientSession: ...

    @property
    def email(self) -> EmailService: ...

    @property
    def jobs(self) -> JobQueue: ...


@dataclass(frozen=True, eq=False)
class Kernel:
    """The long-lived resources every domain shares, built once by the composition root."""

    settings: Settings
    db: Database
    http: aiohttp.ClientSession
    email: EmailService
    jobs: JobQueue


@dataclass(eq=False)
class Domain:
    """A domain's service object (the base of `webhooks.domain.Webhooks` and its siblings):
    the kernel, plus the domain's own resources and the domains it depends on as fields of
    the subclass. The kernel's parts read through, so a domain object is a `Services`."""

    kernel: Kernel

    @property
    def settings(self) -> Settings:
        return self.kernel.settings

    @property
    def db(self) -> Database:
        return self.kernel.db

    @property
    def http(self) -> aiohttp.ClientSession:
        return self.kernel.http

    @property
    def email(self) -> EmailService:
        return self.kernel.email

    @property
    def jobs(self) -> JobQueue:
        return self.kernel.jobs


# The composition root's `Domains` record (tenantd.app.bundle), one per application. Its type
# lives above the domains, so each domain reads its own object through a typed accessor
# (`webhooks.domain.webhooks_of`); tenantd.app.bundle checks the record against each one.
DOMAINS: web.AppKey[Any] = web.AppKey("domains")
