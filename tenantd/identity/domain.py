"""The identity domain's service object: the kernel, the access-token signing keys, the
cache of resolved access tokens and the refresh batcher, built once by the composition root
(tenantd/app/) and handed to every domain above identity that signs or checks tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.identity.rotation import RotationBatcher


@dataclass(eq=False)
class Identity(Domain):
    # Access-token signing and verification keys (filled and kept fresh by the keyring hook).
    keyring: Keyring
    # Refreshes arriving together, renewed in one statement.
    rotation: RotationBatcher
    # Resolved access tokens, off until its listener runs.
    principal_cache: PrincipalCache = field(default_factory=PrincipalCache)


class HasIdentity(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def identity(self) -> Identity: ...


def identity_of(app: web.Application) -> Identity:
    """This application's identity domain (one dict lookup, one attribute)."""
    domains: HasIdentity = app[DOMAINS]
    return domains.identity
