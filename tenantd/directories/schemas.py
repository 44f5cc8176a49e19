"""Bodies and answers of the directory management routes (camelCase JSON)."""

from __future__ import annotations

import datetime as dt
import uuid

from pydantic import Field

from tenantd.db import Row
from tenantd.web.schemas import ApiModel, RequestBody, RowModel, from_row


class DirectoryCreate(RequestBody, json_schema_extra={"examples": [{"name": "Okta"}]}):
    name: str | None = Field(None, max_length=100, description="What the directory is (Okta, ...)")


class GroupRoleBody(RequestBody, json_schema_extra={"examples": [{"role": "admin"}]}):
    role: str | None = Field(
        description="The role key the group's members get (admin, member or a custom role), or null"
    )


class DirectoryOut(ApiModel):
    id: uuid.UUID
    account_id: uuid.UUID
    name: str
    scim_base_url: str = Field(description="What the identity provider is given as SCIM URL")
    created_at: dt.datetime
    last_used_at: dt.datetime | None = None
    users: int = 0
    groups: int = 0

    @classmethod
    def of(cls, row: Row, base_url: str) -> DirectoryOut:
        return from_row(
            cls,
            row,
            scim_base_url=f"{base_url}/scim/v2/{row['id']}",
            users=row.get("users") or 0,
            groups=row.get("groups") or 0,
        )


class DirectoryIssued(DirectoryOut):
    token: str = Field(description="The bearer token, shown this once; only its hash is stored")


class DirectoryDeleted(ApiModel):
    id: uuid.UUID
    deleted: bool = True


class DirectoryGroupOut(RowModel):
    id: uuid.UUID
    display_name: str
    external_id: str | None
    role: str | None
