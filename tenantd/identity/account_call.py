"""The one shape of an account-scoped route: call a service with the services bundle, the
caller and the URL's account id (`{id}`), then answer. Views pass only what is their own."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

from aiohttp import web

from tenantd.identity.bundle import SERVICES, IdentityServices
from tenantd.principal import Principal, current_principal
from tenantd.web.routing import path_uuid

P = ParamSpec("P")
T = TypeVar("T")


async def in_account(
    request: web.Request,
    call: Callable[Concatenate[IdentityServices, Principal, uuid.UUID, P], Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call(services, caller, account id, *args, **kwargs)` for the request's URL account."""
    principal = current_principal(request)
    return await call(request.app[SERVICES], principal, path_uuid(request, "id"), *args, **kwargs)
