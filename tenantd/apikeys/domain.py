"""The API-keys domain's service object: the kernel and the process's cache of verified keys,
built once by the composition root (tenantd/app/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from tenantd.apikeys.cache import ApiKeyCache
from tenantd.bundle import DOMAINS, Domain


@dataclass(eq=False)
class ApiKeys(Domain):
    # Verified server API keys (issue 15), invalidated like the other caches.
    cache: ApiKeyCache = field(default_factory=ApiKeyCache)


class HasApiKeys(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def apikeys(self) -> ApiKeys: ...


def apikeys_of(app: web.Application) -> ApiKeys:
    """This application's API-keys domain (one dict lookup, one attribute)."""
    domains: HasApiKeys = app[DOMAINS]
    return domains.apikeys
