"""The identity domain's view of the services bundle: the shared Protocol plus the signing keys
and the cache of resolved access tokens. Every domain above identity that signs or checks
tokens is handed this one."""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from tenantd.bundle import Services
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.principal_cache import PrincipalCache


class IdentityServices(Services, Protocol):
    @property
    def keyring(self) -> Keyring: ...

    @property
    def principal_cache(self) -> PrincipalCache: ...


SERVICES: web.AppKey[IdentityServices] = web.AppKey("services")


def identity_services(request: web.Request) -> IdentityServices:
    """The services of the app serving `request`."""
    return request.app[SERVICES]
