"""The accounts domain's view of the services bundle: the identity Protocol plus the cache of
serialised /me bodies."""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from tenantd.accounts.me import MeCache
from tenantd.identity.bundle import IdentityServices


class AccountServices(IdentityServices, Protocol):
    @property
    def me_cache(self) -> MeCache: ...


ACCOUNT_SERVICES: web.AppKey[AccountServices] = web.AppKey("account_services")
