"""Query and body of the admin API."""

from __future__ import annotations

from pydantic import Field

from tenantd.web.schemas import ApiModel, RequestBody


class UsersQuery(ApiModel):
    query: str | None = Field(default=None, max_length=200)
    cursor: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=50, ge=1, le=200)


class ImpersonateBody(RequestBody):
    reason: str = Field(min_length=1, max_length=500)
