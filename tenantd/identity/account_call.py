"""The one shape of an account-scoped call: a service gets its domain's object, the caller and
the account id first, then what is the view's or page's own (`in_account_of` for an API route
whose URL names the account as `{id}`, `AccountCall` where a page has the three already)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Concatenate, Generic, ParamSpec, TypeVar

from aiohttp import web

from tenantd.principal import Principal, current_principal
from tenantd.web.routing import path_uuid

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")  # the domain object the services take


@dataclass(frozen=True)
class AccountCall(Generic[S]):
    services: S
    principal: Principal
    account_id: uuid.UUID

    async def __call__(
        self,
        call: Callable[Concatenate[S, Principal, uuid.UUID, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`call(services, caller, account id, *args, **kwargs)`."""
        return await call(self.services, self.principal, self.account_id, *args, **kwargs)


async def in_account_of(
    services: S,
    request: web.Request,
    call: Callable[Concatenate[S, Principal, uuid.UUID, P], Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call` for the request's caller and URL account (`{id}`), with `services`."""
    scoped = AccountCall(services, current_principal(request), path_uuid(request, "id"))
    return await scoped(call, *args, **kwargs)
