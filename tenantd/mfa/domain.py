"""The MFA domain's service object: the kernel and the identity domain it starts sessions
and signs step-up tokens with, built once by the composition root (tenantd/app/) and handed
to views, pages, jobs and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.domain import Identity


@dataclass(eq=False)
class Mfa(Domain):
    # Sessions a second factor finishes and step-up tokens.
    identity: Identity


class HasMfa(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def mfa(self) -> Mfa: ...


def mfa_of(app: web.Application) -> Mfa:
    """This application's MFA domain (one dict lookup, one attribute)."""
    domains: HasMfa = app[DOMAINS]
    return domains.mfa
