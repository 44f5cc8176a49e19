"""Pages of the profile, the account switcher, members and invitations, and join requests."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tenantd.accounts import invitations, join_requests, memberships, restore, roles
from tenantd.accounts import service as accounts
from tenantd.accounts.domain import accounts_of
from tenantd.accounts.schemas import (
    AccountCreate,
    AccountRename,
    InvitationCreate,
    RoleBody,
    TransferBody,
)
from tenantd.auth import deletion
from tenantd.auth import profile as names
from tenantd.auth import service as auth_service
from tenantd.auth.domain import auth_of
from tenantd.auth.errors import TransferOwnershipFirst
from tenantd.auth.schemas import PasswordChangeBody, ProfileBody
from tenantd.errors import AppError, NotFound
from tenantd.identity import permissions
from tenantd.identity.account_call import AccountCall
from tenantd.identity.cookies import REFRESH_COOKIE
from tenantd.mfa import passkeys
from tenantd.mfa import service as mfa
from tenantd.mfa.domain import mfa_of
from tenantd.ui.forms import (
    Form,
    Problem,
    again_showing,
    done_notice,
    field,
    parse,
    problem,
    problem_page,
)
from tenantd.ui.render import redirect
from tenantd.ui.session import ACCESS, ISSUED, STALE, Viewer, client_meta
from tenantd.ui.strings import text
from tenantd.web.json import dumps
from tenantd.web.routing import path_uuid

# A signed-in form page: the router hands it the viewer and the checked form.
Page = Callable[[web.Request, Viewer, Form], Awaitable[web.StreamResponse]]


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound() from None


def _refresh(request: web.Request) -> str | None:
    return request.cookies.get(REFRESH_COOKIE)


def _activate(request: web.Request, activation: accounts.Activation | None) -> None:
    if activation is not None:
        request[ACCESS] = (activation.access_token, activation.claims)


async def work_in(
    request: web.Request,
    viewer: Viewer,
    account_id: uuid.UUID,
    activation: accounts.Activation | None,
) -> None:
    """Make the account just created or joined this browser's active one: the service's
    activation (the caller had none), else a switch to it."""
    if activation is None:
        switched = await accounts.switch_account(
            accounts_of(request.app),
            viewer.principal,
            account_id=account_id,
            refresh_token=_refresh(request),
        )
        activation = switched.activation
    _activate(request, activation)


# -- profile ------------------------------------------------------------------------------------


async def mfa_context(request: web.Request, viewer: Viewer) -> dict[str, Any]:
    """What the "Two-factor authentication" block of /account shows."""
    services = mfa_of(request.app)
    user_id = viewer.principal.user_id
    rows = await passkeys.list_passkeys(services, user_id)
    return {
        "mfa": await mfa.status(services, user_id),
        "passkeys": [
            {**dict(row), "authenticator": passkeys.aaguid_name(row["aaguid"])} for row in rows
        ],
    }


async def profile(
    request: web.Request, viewer: Viewer, *, issue: Problem | None = None, **extra: Any
) -> web.Response:
    """/account: profile, password, email, two-factor block (`extra`: a TOTP setup in
    progress, recovery codes to show once, the step-up form's return page)."""
    context: dict[str, Any] = {
        "totp_setup": None,
        "recovery_codes": None,
        "reauth_back": "/account",
        "new_email": "",
        "blocked": [],
        **(await mfa_context(request, viewer)),
        **extra,
    }
    return problem_page(
        request,
        "account.html",
        text("account.title"),
        issue,
        notice=done_notice(request),
        **context,
    )


async def account_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await profile(request, viewer)


async def profile_again(
    request: web.Request, viewer: Viewer, form: Form | None, exc: AppError
) -> web.Response:
    """/account again with a refused form's problem (a user who owns shared accounts is
    shown which ones to hand over first)."""
    blocked: list[Any] = []
    if isinstance(exc, TransferOwnershipFirst):
        shared = set((exc.details or {}).get("accountIds", []))
        blocked = [m for m in viewer.me["memberships"] if m["accountId"] in shared]
    return await profile(request, viewer, issue=problem(exc), blocked=blocked)


async def password_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    fields = {"currentPassword": field(form, "currentPassword") or None}
    body = parse(PasswordChangeBody, {**fields, "newPassword": field(form, "newPassword")})
    client = client_meta(request)
    result = await auth_service.change_password(
        auth_of(request.app), viewer.principal, body, client=client
    )
    request[ISSUED] = result.tokens
    return redirect(
        request, f"/account?done={'password_breached' if result.warnings else 'password'}"
    )


async def names_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    """Edit my first and last name (the API's body model and service)."""
    fields = {"firstName": field(form, "firstName"), "lastName": field(form, "lastName")}
    body = parse(ProfileBody, fields)
    await names.update_names(
        auth_of(request.app),
        viewer.principal,
        first_name=body.first_name,
        last_name=body.last_name,
    )
    return redirect(request, "/account?done=names")


async def export_get(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Everything stored about me, as the file GET /api/v1/users/me/export answers."""
    exported = await deletion.export_user(auth_of(request.app), user_id=viewer.principal.user_id)
    response = web.Response(body=dumps(exported), content_type="application/json")
    response.headers["Content-Disposition"] = 'attachment; filename="tenantd-export.json"'
    response.headers["Cache-Control"] = "no-store"
    return response


async def delete_me_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    """Delete my user: the API's service, so its step-up and ownership rule hold here too."""
    await deletion.delete_user(auth_of(request.app), viewer.principal)
    request.pop(ISSUED, None)
    request[STALE] = True  # the service ended every session: the cookies go too
    return redirect(request, "/login?done=user_deleted")


# -- accounts -----------------------------------------------------------------------------------


async def _accounts(
    request: web.Request,
    viewer: Viewer,
    *,
    issue: Problem | None = None,
    name: str = "",
) -> web.Response:
    rows = await accounts.list_accounts(accounts_of(request.app), viewer.principal)
    deleted = await restore.restorable(accounts_of(request.app), viewer.principal.user_id)
    return problem_page(
        request,
        "accounts.html",
        text("accounts.title"),
        issue,
        accounts=rows,
        deleted=deleted,
        active_id=viewer.principal.account_id,
        notice=done_notice(request),
        name=name,
        reauth_back="/accounts",  # a refused restore's step-up comes back here
    )


async def restore_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    """Restore a deleted account (its owner, inside the 30 days)."""
    account_id = path_uuid(request, "id")
    await restore.restore_account(accounts_of(request.app), account_id, actor=viewer.principal)
    return redirect(request, "/accounts?done=restored")


accounts_again = again_showing(_accounts, name="name")


async def accounts_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _accounts(request, viewer)


async def create_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    body = parse(AccountCreate, {"name": field(form, "name").strip()})
    created = await accounts.create_account(
        accounts_of(request.app), viewer.principal, name=body.name, refresh_token=_refresh(request)
    )
    await work_in(request, viewer, created.account["id"], created.activation)  # at once
    return redirect(request, "/accounts?done=created")


async def switch_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    switched = await accounts.switch_account(
        accounts_of(request.app),
        viewer.principal,
        account_id=_uuid(field(form, "accountId")),
        refresh_token=_refresh(request),
    )
    _activate(request, switched.activation)
    if field(form, "back") == "members":
        return redirect(request, f"/accounts/{switched.account['id']}/members?done=switched")
    return redirect(request, "/accounts?done=switched")


# -- members --------------------------------------------------------------------------------------


async def _members(
    request: web.Request, viewer: Viewer, *, issue: Problem | None = None
) -> web.Response:
    account_id = path_uuid(request, "id")
    services = accounts_of(request.app)
    context: dict[str, Any] = {
        "account_id": account_id,
        "notice": done_notice(request),
        "members": [],
        "invitations": [],
        "invitations_error": None,
        "active": account_id == viewer.principal.account_id,
        "account_name": "",
        "role_names": {},
        "assignable": [],
    }
    membership = next(
        (m for m in viewer.me["memberships"] if m["accountId"] == str(account_id)), None
    )
    if membership is None:
        raise NotFound("Account not found")
    context["account_name"] = membership["accountName"]
    if context["active"]:
        context["members"] = await memberships.list_members(services, viewer.principal, account_id)
        known = await roles.list_roles(services, viewer.principal, account_id)
        context["role_names"] = {role.key: role.name for role in known}
        context["assignable"] = [role for role in known if role.key != "owner"]
        if viewer.can(permissions.MEMBERS_INVITE):
            try:
                context["invitations"] = await invitations.list_invitations(
                    services, viewer.principal, account_id
                )
            except AppError as exc:
                context["invitations_error"] = problem(exc).message
    return problem_page(
        request,
        "members.html",
        text("members.title", account=context["account_name"]),
        issue,
        **context,
    )


async def members_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _members(request, viewer)


MemberAction = Callable[[web.Request, AccountCall, Any], Awaitable[str]]


def member_action(action: MemberAction) -> Page:
    """A form on the members page (with `members_again`): run it against the URL's account,
    then back to the page with its `done=`, or to the accounts after leaving or deleting one."""

    @functools.wraps(action)
    async def handler(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
        account_id = path_uuid(request, "id")
        call = AccountCall(accounts_of(request.app), viewer.principal, account_id)
        done = await action(request, call, form)
        if done in ("left", "deleted"):
            return redirect(request, f"/accounts?done={done}")
        return redirect(request, f"/accounts/{account_id}/members?done={done}")

    return handler


members_again = again_showing(_members)  # the forms of the members page


@member_action
async def rename(request: web.Request, call: AccountCall, form: Any) -> str:
    body = parse(AccountRename, {"name": field(form, "name").strip()})
    assert body.name is not None
    await call(accounts.rename_account, name=body.name)
    return "renamed"


@member_action
async def invite(request: web.Request, call: AccountCall, form: Any) -> str:
    body = parse(
        InvitationCreate,
        {"email": field(form, "email").strip(), "role": field(form, "role") or "member"},
    )
    await call(invitations.create_invitation, email=str(body.email), role=body.role)
    return "invited"


@member_action
async def resend(request: web.Request, call: AccountCall, form: Any) -> str:
    await call(invitations.resend_invitation, invitation_id=path_uuid(request, "iid"))
    return "resent"


@member_action
async def revoke(request: web.Request, call: AccountCall, form: Any) -> str:
    await call(invitations.revoke_invitation, invitation_id=path_uuid(request, "iid"))
    return "revoked"


@member_action
async def change_role(request: web.Request, call: AccountCall, form: Any) -> str:
    body = parse(RoleBody, {"role": field(form, "role")})
    await call(memberships.change_role, user_id=path_uuid(request, "userId"), role=body.role)
    return "role"


@member_action
async def remove(request: web.Request, call: AccountCall, form: Any) -> str:
    await call(memberships.remove_member, user_id=path_uuid(request, "userId"))
    return "removed"


@member_action
async def transfer(request: web.Request, call: AccountCall, form: Any) -> str:
    body = parse(TransferBody, {"userId": field(form, "userId")})
    await call(memberships.transfer_ownership, user_id=body.user_id)
    return "transferred"


@member_action
async def leave(request: web.Request, call: AccountCall, form: Any) -> str:
    left = await call(memberships.leave_account, refresh_token=_refresh(request))
    _activate(request, left.activation)
    return "left"


@member_action
async def delete(request: web.Request, call: AccountCall, form: Any) -> str:
    deleted = await call(accounts.delete_account, refresh_token=_refresh(request))
    _activate(request, deleted.activation)
    return "deleted"


# -- join requests --------------------------------------------------------------------------------


async def _join_requests(
    request: web.Request, viewer: Viewer, *, issue: Problem | None = None
) -> web.Response:
    rows: list[Any] = []
    account_id = viewer.principal.account_id
    allowed = account_id is not None and viewer.can(permissions.JOIN_REQUESTS_DECIDE)
    if allowed and account_id is not None:
        rows = await join_requests.list_join_requests(
            accounts_of(request.app), viewer.principal, account_id
        )
    return problem_page(
        request,
        "join_requests.html",
        text("join.title"),
        issue,
        requests=rows,
        allowed=allowed,
        notice=done_notice(request),
    )


async def join_requests_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _join_requests(request, viewer)


async def join_decision_post(
    request: web.Request, viewer: Viewer, form: Form
) -> web.StreamResponse:
    account_id = viewer.principal.account_id
    if account_id is None:
        raise NotFound()
    approve = request.match_info["decision"] == "approve"
    decide = join_requests.approve_join_request if approve else join_requests.deny_join_request
    request_id = path_uuid(request, "rid")
    await decide(accounts_of(request.app), viewer.principal, account_id, request_id=request_id)
    return redirect(request, f"/join-requests?done={'approved' if approve else 'denied'}")


join_requests_again = again_showing(_join_requests)
