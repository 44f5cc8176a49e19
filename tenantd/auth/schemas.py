"""Bodies and answers of the auth routes."""

from __future__ import annotations

import datetime as dt
import uuid

from pydantic import Field

from tenantd.web.schemas import ApiModel


class UserOut(ApiModel):
    id: uuid.UUID
    email: str
    first_name: str = ""
    last_name: str = ""
    email_verified_at: dt.datetime | None = None


class AccountRef(ApiModel):
    id: uuid.UUID
    name: str


class MembershipOut(ApiModel):
    account_id: uuid.UUID
    account_name: str
    role: str
    created_at: dt.datetime


class AuthProviderOut(ApiModel):
    provider: str
    created_at: dt.datetime | None = None


class CurrentUser(ApiModel):
    """GET /me when signed in."""

    user: UserOut
    account: AccountRef | None
    role: str | None
    memberships: list[MembershipOut]
    features: dict[str, bool]
    capabilities: dict[str, bool]
    auth_providers: list[AuthProviderOut]
    has_password_login: bool


class AnonymousUser(ApiModel):
    """GET /me when anonymous: user is null and nothing else."""

    user: None = None


class RefreshData(ApiModel):
    user: UserOut | None


class MfaStatus(ApiModel):
    enabled: bool = Field(description="Whether multi-factor authentication is on")
