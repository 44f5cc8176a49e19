"""SCIM 2.0 at /scim/v2/{directoryId}/: Users, Groups, ServiceProviderConfig, Schemas and
ResourceTypes, answered in application/scim+json. The directory's bearer token is the only
credential (no cookie, no API key); every error, 401 included, is a SCIM Error.

Two routes per method carry every endpoint (`/{endpoint}` and `/{endpoint}/{resourceId}`),
so an unknown endpoint is a SCIM 404 as RFC 7644 §3.12 asks, not the API's envelope.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from scim2_models import Context, Group

from tenantd.directories import scim, service, sync
from tenantd.directories.domain import directories_of
from tenantd.directories.scim import ScimError
from tenantd.errors import AppError, ValidationFailed
from tenantd.settings import SETTINGS
from tenantd.web.body import read_limited
from tenantd.web.json import loads_bounded
from tenantd.web.spec import API_BODY_LIMIT, Access, Routes

ROUTES = Routes("scim")

BASE = "/scim/v2/{directoryId}"
ENDPOINT = BASE + "/{endpoint}"
RESOURCE = ENDPOINT + "/{resourceId}"

ScimView = Callable[[web.Request, sync.Directory], Awaitable[web.Response]]


def answer(data: Any, *, status: int = 200, location: str | None = None) -> web.Response:
    headers = {"Content-Type": scim.MEDIA_TYPE}
    if location is not None:
        headers["Location"] = location
    return web.Response(body=orjson.dumps(data), status=status, headers=headers)


def error_answer(error: ScimError) -> web.Response:
    data = error.error.model_dump(scim_ctx=Context.DEFAULT)
    headers = {"Content-Type": scim.MEDIA_TYPE}
    if error.error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="SCIM"'
    return web.Response(body=orjson.dumps(data), status=error.error.status or 400, headers=headers)


def _from_app_error(error: AppError) -> ScimError:
    if isinstance(error, ValidationFailed):
        detail = "; ".join(f"{key}: {value}" for key, value in error.fields.items())
        return ScimError(400, detail or error.message, "invalidValue")
    detail = (
        error.message
        if error.code in ("NOT_FOUND", "CONFLICT")
        else (f"{error.code}: {error.message}")
    )
    return ScimError(error.status, detail)


def scim_view(view: ScimView) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Authenticate the directory's bearer token, run the view, answer any error as SCIM."""

    @functools.wraps(view)
    async def handler(request: web.Request) -> web.Response:
        try:
            directory_id = sync.parse_id(request.match_info["directoryId"])
            if directory_id is None:
                raise sync.unauthorized()
            directory = await service.authenticate(
                directories_of(request.app), directory_id, _bearer(request)
            )
            return await view(request, directory)
        except ScimError as error:
            return error_answer(error)
        except AppError as error:
            return error_answer(_from_app_error(error))

    return handler


def scim_route(method: str, path: str, **spec: Any) -> Callable[[ScimView], Any]:
    """A SCIM route: public (the bearer token is checked by scim_view), unwrapped, its errors
    SCIM Errors, its answers application/scim+json unless `produces` says otherwise."""
    spec.setdefault("produces", scim.MEDIA_TYPE)

    def decorate(view: ScimView) -> Any:
        return ROUTES.route(
            method, path, access=Access.PUBLIC, wrapped=False, errors_as=scim.MEDIA_TYPE, **spec
        )(scim_view(view))

    return decorate


def _bearer(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _base(request: web.Request) -> str:
    settings = request.app[SETTINGS]
    return f"{settings.public_base_url}/scim/v2/{request.match_info['directoryId']}"


async def _body(request: web.Request) -> Any:
    raw = await read_limited(request, API_BODY_LIMIT)
    try:
        return loads_bounded(raw)
    except ValidationFailed:
        raise ScimError(
            400, "The body is not JSON (or nested too deeply)", "invalidSyntax"
        ) from None


def _unknown(request: web.Request) -> ScimError:
    return ScimError(404, f"No SCIM endpoint {request.path}")


def _resource_of(request: web.Request) -> tuple[str, str]:
    """(endpoint, resourceId) of a route on one User or Group."""
    endpoint = request.match_info["endpoint"]
    if endpoint not in MODELS:
        raise _unknown(request)
    return endpoint, request.match_info["resourceId"]


def _writable(request: web.Request) -> None:
    """A create names Users or Groups: the discovery endpoints are read-only, others unknown."""
    endpoint = request.match_info["endpoint"]
    if endpoint in DISCOVERY:
        raise ScimError(405, f"{endpoint} is read-only")
    if endpoint not in MODELS:
        raise _unknown(request)


# -- discovery ----------------------------------------------------------------------------------


def _discovery(request: web.Request, resource_id: str | None) -> web.Response:
    endpoint = request.match_info["endpoint"]
    found = scim.discovery(_base(request))
    if endpoint == "ServiceProviderConfig" and resource_id is None:
        return answer(scim.dump(found["config"], Context.RESOURCE_QUERY_RESPONSE))
    items = found["schemas"] if endpoint == "Schemas" else found["types"]
    if resource_id is not None:
        for item in items:
            if item.id == resource_id:
                return answer(scim.dump(item, Context.RESOURCE_QUERY_RESPONSE))
        raise ScimError(404, f"{endpoint[:-1]} {resource_id} not found")
    search = scim.read_search({}, type(items[0]))
    page = scim.list_response(type(items[0]), items, total=len(items), start=1, search=search)
    return answer(page)


DISCOVERY = ("ServiceProviderConfig", "Schemas", "ResourceTypes")
MODELS: dict[str, type[Any]] = {"Users": scim.UserResource, "Groups": Group}
ANY_RESOURCE: Any = scim.UserResource | Group  # what POST /.search lists


# -- the routes ---------------------------------------------------------------------------------


@scim_route(
    "GET",
    ENDPOINT,
    summary="SCIM: list Users or Groups (filter, startIndex, count, sortBy, attributes), or"
    " read ServiceProviderConfig, Schemas, ResourceTypes (directory bearer token)",
)
async def scim_list(request: web.Request, directory: sync.Directory) -> web.Response:
    endpoint = request.match_info["endpoint"]
    if endpoint in DISCOVERY:
        return _discovery(request, None)
    if endpoint not in MODELS:
        raise _unknown(request)
    return await _search(request, directory, scim.read_search(request.query, MODELS[endpoint]))


async def _search_all(request: web.Request, directory: sync.Directory) -> web.Response:
    search = scim.read_search(await _body(request), ANY_RESOURCE)
    found = await sync.search_all(directories_of(request.app), directory, search, _base(request))
    return answer(
        scim.list_response(
            ANY_RESOURCE, found.resources, total=found.total, start=found.start, search=search
        )
    )


async def _search(request: web.Request, directory: sync.Directory, search: Any) -> web.Response:
    endpoint = request.match_info["endpoint"]
    page = await sync.list_resources(
        directories_of(request.app), directory, endpoint, search, _base(request)
    )
    return answer(
        scim.list_response(
            MODELS[endpoint], page.resources, total=page.total, start=page.start, search=search
        )
    )


@scim_route(
    "POST",
    RESOURCE,
    summary="SCIM: POST /Users/.search or /Groups/.search (a SearchRequest body)",
)
async def scim_search(request: web.Request, directory: sync.Directory) -> web.Response:
    endpoint, resource_id = request.match_info["endpoint"], request.match_info["resourceId"]
    if endpoint not in MODELS or resource_id != ".search":
        raise _unknown(request)
    return await _search(
        request, directory, scim.read_search(await _body(request), MODELS[endpoint])
    )


@scim_route(
    "POST",
    ENDPOINT,
    status=201,
    responses={
        200: "POST /.search: a ListResponse of Users and Groups",
        405: "POST on a read-only endpoint (ServiceProviderConfig, Schemas, ResourceTypes)",
    },
    summary="SCIM: create a User (linked by address, made a member) or a Group; POST /.search"
    " searches both (200)",
)
async def scim_create(request: web.Request, directory: sync.Directory) -> web.Response:
    endpoint = request.match_info["endpoint"]
    if endpoint == ".search":
        return await _search_all(request, directory)
    _writable(request)
    resource = await sync.create_resource(
        directories_of(request.app), directory, endpoint, await _body(request), _base(request)
    )
    created = scim.dump(resource, Context.RESOURCE_CREATION_RESPONSE)
    return answer(created, status=201, location=resource.meta.location)


async def _read(request: web.Request, directory: sync.Directory) -> Any:
    endpoint, resource_id = request.match_info["endpoint"], request.match_info["resourceId"]
    return await sync.read_resource(
        directories_of(request.app), directory, endpoint, resource_id, _base(request)
    )


@scim_route(
    "GET",
    RESOURCE,
    summary="SCIM: one User, Group, Schema or ResourceType",
)
async def scim_read(request: web.Request, directory: sync.Directory) -> web.Response:
    endpoint = request.match_info["endpoint"]
    if endpoint in ("Schemas", "ResourceTypes"):
        return _discovery(request, request.match_info["resourceId"])
    if endpoint not in MODELS:
        raise _unknown(request)
    search = scim.read_search(request.query, MODELS[endpoint])
    resource = await _read(request, directory)
    return answer(scim.dump(resource, Context.RESOURCE_QUERY_RESPONSE, search))


async def _rewrite(
    request: web.Request, directory: sync.Directory, write: Any, context: Context
) -> web.Response:
    """PUT or PATCH (`write`) the User or Group with the body; its resource afterwards."""
    endpoint, resource_id = _resource_of(request)
    resource = await write(
        directories_of(request.app),
        directory,
        endpoint,
        resource_id,
        await _body(request),
        _base(request),
    )
    return answer(scim.dump(resource, context))


@scim_route(
    "PUT",
    RESOURCE,
    summary="SCIM: replace a User or Group (active false: the membership and sessions end)",
)
async def scim_replace(request: web.Request, directory: sync.Directory) -> web.Response:
    return await _rewrite(
        request, directory, sync.replace_resource, Context.RESOURCE_REPLACEMENT_RESPONSE
    )


@scim_route(
    "PATCH",
    RESOURCE,
    summary="SCIM: RFC 7644 PATCH of a User or Group (the forms Entra ID and Okta send)",
)
async def scim_patch(request: web.Request, directory: sync.Directory) -> web.Response:
    return await _rewrite(request, directory, sync.patch_resource, Context.RESOURCE_PATCH_RESPONSE)


@scim_route(
    "DELETE",
    RESOURCE,
    status=204,
    summary="SCIM: delete a User (the membership and sessions end at once) or a Group",
    produces="application/json",
)
async def scim_delete(request: web.Request, directory: sync.Directory) -> web.Response:
    endpoint, resource_id = _resource_of(request)
    await sync.delete_resource(directories_of(request.app), directory, endpoint, resource_id)
    return web.Response(status=204)
