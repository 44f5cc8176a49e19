"""The accounts domain's service object: the kernel, the cache of serialised /me bodies and
the identity domain its account switches issue tokens with, built once by the composition
root (tenantd/app/) and handed to views, pages, jobs and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from tenantd.accounts.me import MeCache
from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.domain import Identity


@dataclass(eq=False)
class Accounts(Domain):
    # Tokens of the account a caller switches to, creates or leaves.
    identity: Identity
    # Serialised /me bodies, off until its listener runs.
    me_cache: MeCache = field(default_factory=MeCache)


class HasAccounts(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def accounts(self) -> Accounts: ...


def accounts_of(app: web.Application) -> Accounts:
    """This application's accounts domain (one dict lookup, one attribute)."""
    domains: HasAccounts = app[DOMAINS]
    return domains.accounts
