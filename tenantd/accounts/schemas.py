"""Bodies and answers of the tenancy routes (camelCase JSON)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from tenantd.db import Row
from tenantd.web.schemas import ApiModel, Mailbox, RequestBody, RowModel, from_row

AccountName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# A role of the account: admin, member or a custom role's key (never owner: by transfer only).
RoleKey = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,62}$"),
    Field(description="admin, member or a custom role's key (docs/roles.md)"),
]
RoleName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
PermissionList = Annotated[
    list[Annotated[str, StringConstraints(max_length=200)]],
    Field(
        max_length=200,
        description="Permission strings of a-z 0-9 _ . : * - (`*` matches any run of"
        " characters); tenantd's own are listed in docs/roles.md",
    ),
]

# Documented request examples (the OpenAPI test checks each against the schema and the server).
_NAME = {"examples": [{"name": "Acme Inc."}]}
_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"


# -- request bodies ---------------------------------------------------------------------------


class AccountCreate(RequestBody, json_schema_extra=_NAME):
    name: AccountName


class AccountRename(RequestBody, json_schema_extra=_NAME):
    """PATCH /api/v1/accounts/{id}: `name` (admin+) and/or `requireMfa` (owner, step-up)."""

    name: AccountName | None = None
    require_mfa: bool | None = Field(
        None, description="Members without a second factor cannot make the account active"
    )

    @model_validator(mode="after")
    def _something(self) -> AccountRename:
        if self.name is None and self.require_mfa is None:
            raise ValueError("give name and/or requireMfa")
        return self


class SwitchBody(RequestBody, json_schema_extra={"examples": [{"accountId": _ID}]}):
    account_id: uuid.UUID


class TransferBody(RequestBody, json_schema_extra={"examples": [{"userId": _ID}]}):
    user_id: uuid.UUID


class RoleBody(RequestBody, json_schema_extra={"examples": [{"role": "admin"}]}):
    role: RoleKey = Field(
        description="admin, member or a custom role's key; the owner changes only by transfer"
    )


class InvitationCreate(
    RequestBody,
    json_schema_extra={"examples": [{"email": "grace@example.com", "role": "member"}]},
):
    email: Mailbox
    role: RoleKey = "member"


class AcceptBody(
    RequestBody,
    json_schema_extra={"examples": [{"token": "dpF1mWNbOSbgdQ6X5cu9nqyjnB3PqdAu0ROt1ajH9DM"}]},
):
    token: str = Field(min_length=1, max_length=512)


_ROLE = {"key": "billing-manager", "name": "Billing manager", "permissions": ["billing:*"]}


class RoleCreate(RequestBody, json_schema_extra={"examples": [_ROLE]}):
    key: RoleKey
    name: RoleName
    permissions: PermissionList


class RoleUpdate(
    RequestBody, json_schema_extra={"examples": [{"permissions": ["billing:*", "members:read"]}]}
):
    """Any of `name` and `permissions` (a new list replaces the old); `key` may be repeated
    but never changes."""

    key: RoleKey | None = None
    name: RoleName | None = None
    permissions: PermissionList | None = None

    @model_validator(mode="after")
    def _something(self) -> RoleUpdate:
        if self.name is None and self.permissions is None:
            raise ValueError("give name and/or permissions")
        return self


# -- answers ----------------------------------------------------------------------------------


class RoleOut(ApiModel):
    key: str
    name: str
    permissions: list[str]
    system: bool = Field(description="owner, admin, member: fixed, never changed or deleted")
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


class AccountSummary(ApiModel):
    id: uuid.UUID
    name: str
    role: str
    created_at: dt.datetime
    claimed_domain: str | None = None
    active: bool = Field(description="True for the account of the current access token")

    @classmethod
    def of(cls, row: Row, *, active_id: uuid.UUID | None) -> AccountSummary:
        return from_row(cls, row, active=row["id"] == active_id)


class AccountDetail(ApiModel):
    id: uuid.UUID
    name: str
    created_at: dt.datetime
    claimed_domain: str | None = None
    role: str | None = None
    plan: str | None
    seats: int
    seats_used: int
    features: dict[str, bool]
    require_mfa: bool = False


class AccountDeleted(ApiModel):
    id: uuid.UUID
    deleted_at: dt.datetime
    purge_after: dt.datetime


class AccountDeletedOut(ApiModel):
    account: AccountDeleted


class AccountRef(ApiModel):
    id: uuid.UUID
    name: str


class SwitchResult(ApiModel):
    account: AccountRef
    role: str

    @classmethod
    def of(cls, account: Row, role: str) -> SwitchResult:
        return cls(account=AccountRef(id=account["id"], name=account["name"]), role=role)


class MemberOut(ApiModel):
    user_id: uuid.UUID
    email: str
    role: str
    created_at: dt.datetime


class MembershipOut(RowModel):
    account_id: uuid.UUID
    user_id: uuid.UUID
    role: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None = None


class LeaveResult(ApiModel):
    membership: MembershipOut
    active_account_id: uuid.UUID | None = Field(
        description="The account the new access token points at (null: none left)"
    )


class TransferResult(ApiModel):
    owner: MembershipOut
    previous_owner: MembershipOut


class InvitationOut(RowModel):
    id: uuid.UUID
    account_id: uuid.UUID
    email: str
    role: str
    invited_by: uuid.UUID | None
    created_at: dt.datetime
    expires_at: dt.datetime
    resent_at: dt.datetime | None = None
    accepted_at: dt.datetime | None = None
    revoked_at: dt.datetime | None = None


class InvitationIssued(ApiModel):
    invitation: InvitationOut
    token: str = Field(description="The raw token, shown this once; only its hash is stored")

    @classmethod
    def of(cls, invitation: Row, token: str) -> InvitationIssued:
        return cls(invitation=InvitationOut.of(invitation), token=token)


class AcceptResult(ApiModel):
    account: AccountRef
    membership: MembershipOut


class JoinRequestOut(RowModel):
    id: uuid.UUID
    account_id: uuid.UUID
    user_id: uuid.UUID
    email: str
    domain: str
    status: str
    created_at: dt.datetime
    decided_at: dt.datetime | None = None
    decided_by: uuid.UUID | None = None


class JoinDecision(ApiModel):
    join_request: JoinRequestOut
    membership: MembershipOut | None = None

    @classmethod
    def of(cls, join_request: Row, membership: Row | None) -> JoinDecision:
        """A decided request; approved: the membership it made (none when denied)."""
        return cls(
            join_request=JoinRequestOut.of(join_request),
            membership=MembershipOut.of(membership) if membership else None,
        )


# -- the audit log (issue 14) ------------------------------------------------------------------


class AuditLogQuery(ApiModel):
    """`action`: one action name (`member.removed`); `actor`: a user id, or `system` for rows
    written by sweeps and operators; `cursor`: the `nextCursor` of the previous page."""

    cursor: Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_-]+$")] | None = None
    action: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    actor: (
        Annotated[
            str,
            Field(
                max_length=36,
                pattern=r"^(system|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$",
            ),
        ]
        | None
    ) = None
    limit: int = Field(default=50, ge=1, le=100)


class AuditEntryOut(ApiModel):
    id: int
    action: str
    actor_user_id: uuid.UUID | None
    actor_email: str | None
    target: str | None
    data: dict[str, Any]
    created_at: dt.datetime


class AuditLogPage(ApiModel):
    items: list[AuditEntryOut]
    next_cursor: str | None

    @classmethod
    def of(cls, rows: list[Row], next_cursor: str | None) -> AuditLogPage:
        return cls(
            items=[AuditEntryOut.model_validate(row) for row in rows], next_cursor=next_cursor
        )


class AccountRestored(RowModel):
    id: uuid.UUID
    name: str
    claimed_domain: str | None = None
    created_at: dt.datetime


class AccountRestoredOut(ApiModel):
    account: AccountRestored

    @classmethod
    def of(cls, row: Row) -> AccountRestoredOut:
        return cls(account=AccountRestored.of(row))
