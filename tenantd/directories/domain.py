"""The SCIM directories domain's service object: the kernel alone (a directory's state is its
rows), built once by the composition root (tenantd/app/) and handed to its views, the SCIM
routes, the portal's pages and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain


@dataclass(eq=False)
class Directories(Domain):
    """The kernel is all a directory's provisioning reads."""


class HasDirectories(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def directories(self) -> Directories: ...


def directories_of(app: web.Application) -> Directories:
    """This application's SCIM directories domain (one dict lookup, one attribute)."""
    domains: HasDirectories = app[DOMAINS]
    return domains.directories
