"""The services bundle's Protocol: what every domain may use of the long-lived resources (the
concrete bundle is `tenantd.app.bundle`). A domain that needs more declares its own Protocol
on top of this one in its `bundle.py`. (A domain's `service.py` is something else: its rules.)"""

from __future__ import annotations

from typing import Protocol

import aiohttp

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
