"""The auth domain's service object: the kernel, the identity domain its sign-ins start
sessions with, the accounts domain whose /me bodies it serves and the OpenID client, built
once by the composition root (tenantd/app/) and handed to views, pages, jobs and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.accounts.domain import Accounts
from tenantd.auth.oauth.client import OidcClient
from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.domain import Identity


@dataclass(eq=False)
class Auth(Domain):
    # Sessions, access tokens and the keys that sign them.
    identity: Identity
    # The /me bodies' cache (GET /users/me).
    accounts: Accounts
    # The providers' discovery documents and keys, cached for the process (shared with SSO).
    oidc: OidcClient


class HasAuth(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def auth(self) -> Auth: ...


def auth_of(app: web.Application) -> Auth:
    """This application's auth domain (one dict lookup, one attribute)."""
    domains: HasAuth = app[DOMAINS]
    return domains.auth
