"""The admin portal's service object: the kernel alone (the portal keeps no resource of its
own), built once by the composition root (tenantd/app/) and handed to its view and pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain


@dataclass(eq=False)
class Portal(Domain):
    """The kernel is all the portal reads (its links and sessions are rows)."""


class HasPortal(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def portal(self) -> Portal: ...


def portal_of(app: web.Application) -> Portal:
    """This application's admin portal domain (one dict lookup, one attribute)."""
    domains: HasPortal = app[DOMAINS]
    return domains.portal
