"""Bodies and queries of the events API and the endpoint management routes."""

from __future__ import annotations

import datetime as dt

from pydantic import Field

from tenantd.web.schemas import ApiModel, RequestBody


class EventsQuery(ApiModel):
    after: str | None = Field(default=None, pattern=r"^[0-9]{1,18}$")
    types: str | None = Field(default=None, max_length=2000)
    limit: int = Field(default=100, ge=1, le=1000)


class EndpointBody(RequestBody):
    url: str = Field(min_length=1, max_length=2000)
    events: list[str] | None = Field(default=None, max_length=100)
    description: str = Field(default="", max_length=500)


class DeliveriesQuery(ApiModel):
    failed: bool = False
    limit: int = Field(default=100, ge=1, le=1000)


class ReplayBody(RequestBody):
    since: dt.datetime


class RotateQuery(ApiModel):
    # true: the old secret leaked, it stops signing at once (no 24-hour overlap)
    now: bool = False
