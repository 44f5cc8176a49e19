"""The SSO domain's service object: the kernel and the identity domain its sign-ins start
sessions with, built once by the composition root (tenantd/app/) and handed to its views and
pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.auth.oauth.client import OidcClient
from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.domain import Identity


@dataclass(eq=False)
class Sso(Domain):
    # Sessions of a verified assertion or ID token, and the OpenID Connect code flow shared
    # with social sign-in.
    identity: Identity
    # The OpenID Connect client, the one social sign-in uses.
    oidc: OidcClient


class HasSso(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def sso(self) -> Sso: ...


def sso_of(app: web.Application) -> Sso:
    """This application's SSO domain (one dict lookup, one attribute)."""
    domains: HasSso = app[DOMAINS]
    return domains.sso
