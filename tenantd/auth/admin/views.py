"""`/api/v1/admin/users`: server routes under the API-key scope `users:manage`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from aiohttp import web

from tenantd.apikeys.principal import ActingKey, acting_key
from tenantd.auth.admin import service
from tenantd.auth.admin.schemas import ImpersonateBody, UsersQuery
from tenantd.auth.domain import Auth, auth_of
from tenantd.web.routing import path_uuid
from tenantd.web.spec import Access, Routes

ROUTES = Routes("admin")

SCOPE = "users:manage"
USERS = "/api/v1/admin/users"
USER = USERS + "/{id}"
MANAGE: dict[str, Any] = {"access": Access.API_KEY, "scope": SCOPE}

P = ParamSpec("P")
T = TypeVar("T")


async def as_operator(
    request: web.Request,
    call: Callable[Concatenate[Auth, ActingKey, P], Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call(services, the request's API key, ...)`: an operator's action, audited as that key."""
    return await call(auth_of(request.app), acting_key(request), *args, **kwargs)


@ROUTES.get(USERS, summary="List and search users (keyset pages)", **MANAGE)
async def list_users(request: web.Request, query: UsersQuery) -> Any:
    """`{items, nextCursor}`; `query` matches email and names; pass nextCursor as `cursor`."""
    page = await service.list_users(
        auth_of(request.app), query=query.query, cursor=query.cursor, limit=query.limit
    )
    return {"items": [service.user_json(row) for row in page.items], "nextCursor": page.next_cursor}


@ROUTES.get(USER, summary="One user with memberships and sign-in methods", **MANAGE)
async def show_user(request: web.Request) -> Any:
    return await service.show_user(auth_of(request.app), user_id=path_uuid(request, "id"))


@ROUTES.post(
    f"{USER}/disable", summary="Disable a user: end every session, refuse sign-in", **MANAGE
)
async def disable_user(request: web.Request) -> Any:
    row = await as_operator(request, service.disable_user, user_id=path_uuid(request, "id"))
    return service.user_json(row)


@ROUTES.post(f"{USER}/enable", summary="Enable a disabled user", **MANAGE)
async def enable_user(request: web.Request) -> Any:
    row = await as_operator(request, service.enable_user, user_id=path_uuid(request, "id"))
    return service.user_json(row)


@ROUTES.delete(USER, summary="Delete a user (the erasure of self-delete)", **MANAGE)
async def delete_user(request: web.Request) -> Any:
    done = await as_operator(request, service.delete_user, user_id=path_uuid(request, "id"))
    return {
        "deletedAt": done.deleted_at,
        "anonymizeAfter": done.anonymize_after,
        "accountsDeleted": done.accounts_deleted,
    }


@ROUTES.post(f"{USER}/resend-verification", summary="Mail a fresh verification link", **MANAGE)
async def admin_resend_verification(request: web.Request) -> Any:
    await as_operator(request, service.resend_verification, user_id=path_uuid(request, "id"))
    return {}


@ROUTES.post(
    f"{USER}/impersonate",
    summary="A one-time link that signs in as the user (audited with its reason)",
    **MANAGE,
)
async def impersonate(request: web.Request, body: ImpersonateBody) -> Any:
    url = await as_operator(
        request, service.impersonate, user_id=path_uuid(request, "id"), reason=body.reason
    )
    return {"url": url}
