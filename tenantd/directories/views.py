"""Directory management routes: an account's SCIM directories (owner or admin)."""

from __future__ import annotations

from aiohttp import web

from tenantd.directories import service
from tenantd.directories.domain import directories_of
from tenantd.directories.schemas import (
    DirectoryCreate,
    DirectoryDeleted,
    DirectoryGroupOut,
    DirectoryIssued,
    DirectoryOut,
    GroupRoleBody,
)
from tenantd.identity.account_call import in_account_of
from tenantd.web.routing import path_uuid
from tenantd.web.spec import Routes

ROUTES = Routes("directories")

DIRECTORIES = "/api/v1/accounts/{id}/directories"


@ROUTES.post(
    DIRECTORIES,
    status=201,
    summary="Add a SCIM directory (owner, admin); its bearer token is shown once",
)
async def create_directory(request: web.Request, body: DirectoryCreate) -> DirectoryIssued:
    services = directories_of(request.app)
    created = await in_account_of(services, request, service.create_directory, name=body.name)
    out = DirectoryOut.of(created.directory, services.settings.public_base_url)
    return DirectoryIssued(**out.model_dump(), token=created.token)


@ROUTES.get(DIRECTORIES, summary="The account's SCIM directories")
async def list_directories(request: web.Request) -> list[DirectoryOut]:
    services = directories_of(request.app)
    rows = await in_account_of(services, request, service.list_directories)
    base_url = services.settings.public_base_url
    return [DirectoryOut.of(row, base_url) for row in rows]


@ROUTES.delete(
    DIRECTORIES + "/{directoryId}",
    summary="Remove a SCIM directory and its token (memberships stay)",
)
async def delete_directory(request: web.Request) -> DirectoryDeleted:
    directory_id = path_uuid(request, "directoryId")
    await in_account_of(
        directories_of(request.app), request, service.delete_directory, directory_id=directory_id
    )
    return DirectoryDeleted(id=directory_id)


@ROUTES.get(
    DIRECTORIES + "/{directoryId}/groups",
    summary="A directory's groups and the role each maps to",
)
async def list_directory_groups(request: web.Request) -> list[DirectoryGroupOut]:
    rows = await in_account_of(
        directories_of(request.app),
        request,
        service.list_groups,
        directory_id=path_uuid(request, "directoryId"),
    )
    return [DirectoryGroupOut.of(row) for row in rows]


@ROUTES.put(
    DIRECTORIES + "/{directoryId}/groups/{groupId}/role",
    summary="Map a directory group to a role (null: unmapped); its members follow at once",
)
async def map_directory_group(request: web.Request, body: GroupRoleBody) -> DirectoryGroupOut:
    row = await in_account_of(
        directories_of(request.app),
        request,
        service.map_group,
        directory_id=path_uuid(request, "directoryId"),
        group_id=path_uuid(request, "groupId"),
        role=body.role,
    )
    return DirectoryGroupOut.of(row)
