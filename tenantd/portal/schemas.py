"""Bodies and answers of the admin portal routes (camelCase JSON)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from tenantd.web.schemas import ApiModel, RequestBody


class PortalLinkCreate(RequestBody, json_schema_extra={"examples": [{"intent": "sso"}]}):
    intent: Literal["sso", "directory"] = Field(
        description="sso: configure the account's SSO connection; directory: its SCIM directory"
    )


class PortalLinkOut(ApiModel):
    url: str = Field(description="Opens once, within an hour; give it to the customer's IT")
    intent: str
    expires_at: dt.datetime
