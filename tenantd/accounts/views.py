"""Tenancy routes. The active account is the token's aid; a URL account must equal it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from aiohttp import web

from tenantd.accounts import (
    audit_log,
    invitations,
    join_requests,
    memberships,
    restore,
    roles,
    service,
)
from tenantd.accounts.domain import Accounts, accounts_of
from tenantd.accounts.schemas import (
    AcceptBody,
    AcceptResult,
    AccountCreate,
    AccountDeleted,
    AccountDeletedOut,
    AccountDetail,
    AccountRef,
    AccountRename,
    AccountRestoredOut,
    AccountSummary,
    AuditLogPage,
    AuditLogQuery,
    InvitationCreate,
    InvitationIssued,
    InvitationOut,
    JoinDecision,
    JoinRequestOut,
    LeaveResult,
    MemberOut,
    MembershipOut,
    RoleBody,
    RoleCreate,
    RoleOut,
    RoleUpdate,
    SwitchBody,
    SwitchResult,
    TransferBody,
    TransferResult,
)
from tenantd.identity.account_call import in_account_of
from tenantd.identity.cookies import REFRESH_COOKIE, set_access_cookie
from tenantd.principal import Principal, current_principal
from tenantd.web.json import ok
from tenantd.web.routing import path_uuid
from tenantd.web.spec import Routes

ROUTES = Routes("accounts")

ACCOUNT = "/api/v1/accounts/{id}"

P = ParamSpec("P")
T = TypeVar("T")


async def in_account(
    request: web.Request,
    call: Callable[Concatenate[Accounts, Principal, uuid.UUID, P], Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call` with this app's accounts domain, for the request's caller and URL account."""
    return await in_account_of(accounts_of(request.app), request, call, *args, **kwargs)


def _refresh(request: web.Request) -> str | None:
    return request.cookies.get(REFRESH_COOKIE)


def _answer(
    request: web.Request, data: Any, activation: service.Activation | None, *, status: int = 200
) -> web.Response:
    """Wrap `data`; with an activation also set the new auth_token cookie (refresh kept)."""
    response = ok(data, status=status)
    if activation is not None:
        settings = accounts_of(request.app).settings
        set_access_cookie(response, settings, activation.access_token, activation.claims)
    return response


# -- accounts ---------------------------------------------------------------------------------


@ROUTES.get("/api/v1/accounts", summary="My accounts with role", mfa_exempt=True)
async def list_accounts(request: web.Request) -> list[AccountSummary]:
    principal = current_principal(request)
    rows = await service.list_accounts(accounts_of(request.app), principal)
    return [AccountSummary.of(row, active_id=principal.account_id) for row in rows]


@ROUTES.post(
    "/api/v1/accounts",
    response=AccountSummary,
    status=201,
    responses={
        409: "DOMAIN_CLAIMED: the caller's join request to the account claiming its email domain"
        " is pending (ACCOUNT_DOMAIN_CLAIMING)"
    },
    summary="Create an account; the caller becomes its owner",
)
async def create_account(request: web.Request, body: AccountCreate) -> web.Response:
    principal = current_principal(request)
    services = accounts_of(request.app)
    created = await service.create_account(
        services, principal, name=body.name, refresh_token=_refresh(request)
    )
    active_id = created.activation.account_id if created.activation else principal.account_id
    data = AccountSummary.of(created.account, active_id=active_id)
    return _answer(request, data, created.activation, status=201)


@ROUTES.post(
    "/api/v1/accounts/switch",
    mfa_exempt=True,
    response=SwitchResult,
    summary="Switch the active account: a new access token with that aid",
)
async def switch_account(request: web.Request, body: SwitchBody) -> web.Response:
    services = accounts_of(request.app)
    switched = await service.switch_account(
        services,
        current_principal(request),
        account_id=body.account_id,
        refresh_token=_refresh(request),
    )
    return _answer(request, SwitchResult.of(switched.account, switched.role), switched.activation)


@ROUTES.get(ACCOUNT, summary="The active account (any member)")
async def read_account(request: web.Request) -> AccountDetail:
    detail = await in_account(request, service.read_account)
    return AccountDetail.model_validate(detail, from_attributes=True)


@ROUTES.patch(
    ACCOUNT,
    responses={403: "FORBIDDEN, or REAUTH_REQUIRED (requireMfa needs a recent sign-in)"},
    summary="Rename (admin+); requireMfa (owner, step-up)",
)
async def rename_account(request: web.Request, body: AccountRename) -> AccountDetail:
    detail = await in_account(
        request, service.update_account, name=body.name, require_mfa=body.require_mfa
    )
    return AccountDetail.model_validate(detail, from_attributes=True)


@ROUTES.delete(ACCOUNT, response=AccountDeletedOut, summary="Soft-delete the account (owner only)")
async def delete_account(request: web.Request) -> web.Response:
    deleted = await in_account(request, service.delete_account, refresh_token=_refresh(request))
    return _answer(request, _deleted_out(deleted), deleted.activation)


def _deleted_out(deleted: service.Deleted) -> AccountDeletedOut:
    account = AccountDeleted(
        id=deleted.account_id, deleted_at=deleted.deleted_at, purge_after=deleted.purge_after
    )
    return AccountDeletedOut(account=account)


@ROUTES.post(
    ACCOUNT + "/restore",
    responses={
        403: "FORBIDDEN: a member who is not the owner; REAUTH_REQUIRED: authenticate again "
        "first (POST /api/v1/auth/reauth)",
        404: "NOT_FOUND: no such account, or not yours",
        409: "ACCOUNT_NOT_DELETED, or DOMAIN_TAKEN (details.domain): another live account "
        "claimed the domain meanwhile",
        410: "ACCOUNT_PURGED: the grace period is over",
    },
    summary="Restore a soft-deleted account within the grace period (owner at deletion time)",
)
async def restore_account(request: web.Request) -> AccountRestoredOut:
    services = accounts_of(request.app)
    row = await restore.restore_account(
        services, path_uuid(request, "id"), actor=current_principal(request)
    )
    return AccountRestoredOut.of(row)


# -- memberships ------------------------------------------------------------------------------


@ROUTES.post(
    ACCOUNT + "/transfer-ownership",
    summary="Transfer ownership to an active member (owner only)",
)
async def transfer_ownership(request: web.Request, body: TransferBody) -> TransferResult:
    done = await in_account(request, memberships.transfer_ownership, user_id=body.user_id)
    return TransferResult(
        owner=MembershipOut.of(done.owner), previous_owner=MembershipOut.of(done.previous_owner)
    )


@ROUTES.get(ACCOUNT + "/members", summary="Active members")
async def list_members(request: web.Request) -> list[MemberOut]:
    rows = await in_account(request, memberships.list_members)
    return [MemberOut.model_validate(row) for row in rows]


@ROUTES.patch(
    ACCOUNT + "/members/{userId}",
    responses={
        403: "FORBIDDEN: no members:change_role, or the roles involved hold permissions"
        " the caller's custom role lacks",
        422: "VALIDATION_ERROR: not a role of the account (details.fields.role), or owner",
    },
    summary="Give a member another role of the account, custom ones too (never the owner)",
)
async def change_role(request: web.Request, body: RoleBody) -> MembershipOut:
    row = await in_account(
        request, memberships.change_role, user_id=path_uuid(request, "userId"), role=body.role
    )
    return MembershipOut.of(row)


@ROUTES.delete(
    ACCOUNT + "/members/{userId}",
    summary="Remove a member (admin+; never the owner); the row is kept as revoked",
)
async def remove_member(request: web.Request) -> MembershipOut:
    row = await in_account(request, memberships.remove_member, user_id=path_uuid(request, "userId"))
    return MembershipOut.of(row)


@ROUTES.post(
    ACCOUNT + "/leave",
    response=LeaveResult,
    summary="Leave the account (the owner cannot); the session moves to another account",
)
async def leave_account(request: web.Request) -> web.Response:
    left = await in_account(request, memberships.leave_account, refresh_token=_refresh(request))
    membership = MembershipOut.of(left.membership)
    data = LeaveResult(membership=membership, active_account_id=left.activation.account_id)
    return _answer(request, data, left.activation)


# -- invitations ------------------------------------------------------------------------------


@ROUTES.get(ACCOUNT + "/invitations", summary="Pending invitations")
async def list_invitations(request: web.Request) -> list[InvitationOut]:
    rows = await in_account(request, invitations.list_invitations)
    return [InvitationOut.of(row) for row in rows]


@ROUTES.post(
    ACCOUNT + "/invitations",
    status=201,
    responses={429: "RATE_LIMITED (Retry-After): too many invitations by you or to this address"},
    summary="Invite an address (admin+, feature team_invitations); the raw token shown once",
)
async def create_invitation(request: web.Request, body: InvitationCreate) -> InvitationIssued:
    issued = await in_account(
        request, invitations.create_invitation, email=str(body.email), role=body.role
    )
    return InvitationIssued.of(issued.invitation, issued.token)


@ROUTES.post(
    ACCOUNT + "/invitations/{iid}/resend",
    responses={429: "RATE_LIMITED (Retry-After): too many invitations by you or to this address"},
    summary="Resend: the token is rotated, older links stop working",
)
async def resend_invitation(request: web.Request) -> InvitationIssued:
    issued = await in_account(
        request, invitations.resend_invitation, invitation_id=path_uuid(request, "iid")
    )
    return InvitationIssued.of(issued.invitation, issued.token)


@ROUTES.delete(ACCOUNT + "/invitations/{iid}", summary="Revoke (soft delete)")
async def revoke_invitation(request: web.Request) -> InvitationOut:
    row = await in_account(
        request, invitations.revoke_invitation, invitation_id=path_uuid(request, "iid")
    )
    return InvitationOut.of(row)


@ROUTES.post(
    "/api/v1/invitations/accept",
    response=AcceptResult,
    summary="Accept an invitation with its raw token (seat cap checked)",
)
async def accept_invitation(request: web.Request, body: AcceptBody) -> web.Response:
    services = accounts_of(request.app)
    accepted = await invitations.accept_invitation(
        services, current_principal(request), token=body.token, refresh_token=_refresh(request)
    )
    data = AcceptResult(
        account=AccountRef(id=accepted.account["id"], name=accepted.account["name"]),
        membership=MembershipOut.of(accepted.membership),
    )
    return _answer(request, data, accepted.activation)


# -- join requests ----------------------------------------------------------------------------


@ROUTES.get(ACCOUNT + "/join-requests", summary="Pending join requests")
async def list_join_requests(request: web.Request) -> list[JoinRequestOut]:
    rows = await in_account(request, join_requests.list_join_requests)
    return [JoinRequestOut.of(row) for row in rows]


@ROUTES.post(
    ACCOUNT + "/join-requests/{rid}/approve",
    summary="Approve a join request (admin+; seat cap checked)",
)
async def approve_join_request(request: web.Request) -> JoinDecision:
    decision = await in_account(
        request, join_requests.approve_join_request, request_id=path_uuid(request, "rid")
    )
    return JoinDecision.of(decision.join_request, decision.membership)


@ROUTES.post(ACCOUNT + "/join-requests/{rid}/deny", summary="Deny a join request")
async def deny_join_request(request: web.Request) -> JoinDecision:
    decision = await in_account(
        request, join_requests.deny_join_request, request_id=path_uuid(request, "rid")
    )
    return JoinDecision.of(decision.join_request, decision.membership)


# -- the audit log ----------------------------------------------------------------------------


@ROUTES.get(
    ACCOUNT + "/audit-log",
    responses={403: "FORBIDDEN: members may not read the audit log"},
    summary="The account's audit log, newest first (owner and admin)",
)
async def read_audit_log(request: web.Request, query: AuditLogQuery) -> AuditLogPage:
    page = await in_account(
        request,
        audit_log.read_audit_log,
        cursor=query.cursor,
        action=query.action,
        by=query.actor,
        limit=query.limit,
    )
    return AuditLogPage.of(page.rows, page.next_cursor)


# -- roles ----------------------------------------------------------------------------------------


def _role(role: roles.Role) -> RoleOut:
    return RoleOut.model_validate(role, from_attributes=True)


@ROUTES.get(
    ACCOUNT + "/roles",
    summary="The account's roles: owner, admin, member, then its custom roles",
)
async def list_roles(request: web.Request) -> list[RoleOut]:
    found = await in_account(request, roles.list_roles)
    return [_role(role) for role in found]


@ROUTES.post(
    ACCOUNT + "/roles",
    status=201,
    responses={
        403: "FORBIDDEN: no roles:manage, or a permission the caller's custom role lacks",
        409: "ROLE_EXISTS: the account has a role with this key; SYSTEM_ROLE: owner, admin"
        " or member",
        422: "VALIDATION_ERROR: details.fields names each bad permission (permissions.<i>)",
    },
    summary="Create a custom role (owner or admin)",
)
async def create_role(request: web.Request, body: RoleCreate) -> RoleOut:
    role = await in_account(
        request, roles.create_role, key=body.key, name=body.name, grants=body.permissions
    )
    return _role(role)


@ROUTES.patch(
    ACCOUNT + "/roles/{key}",
    responses={
        409: "SYSTEM_ROLE: owner, admin and member cannot be changed",
        422: "VALIDATION_ERROR: details.fields names each bad permission (permissions.<i>)",
    },
    summary="Rename a custom role or replace its permissions (owner or admin)",
)
async def update_role(request: web.Request, body: RoleUpdate) -> RoleOut:
    role = await in_account(
        request,
        roles.update_role,
        request.match_info["key"],
        name=body.name,
        grants=body.permissions,
        new_key=body.key,
    )
    return _role(role)


@ROUTES.delete(
    ACCOUNT + "/roles/{key}",
    responses={
        409: "ROLE_IN_USE (details.members, details.invitations): give those members another"
        " role first; SYSTEM_ROLE: owner, admin and member cannot be deleted",
    },
    summary="Delete a custom role nobody has (owner or admin)",
)
async def delete_role(request: web.Request) -> RoleOut:
    role = await in_account(request, roles.delete_role, request.match_info["key"])
    return _role(role)
