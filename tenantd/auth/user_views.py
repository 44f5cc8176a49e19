"""The user's own record: names, change of email address (and its "this wasn't me" link),
delete my user, export my data."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.auth import deletion, email_change, profile, security_undo
from tenantd.auth.domain import auth_of
from tenantd.auth.schemas import (
    REAUTH_REQUIRED,
    EmailChangeBody,
    EmailChangeCancelled,
    EmailChanged,
    LinkTokenBody,
    ProfileBody,
    ProfileOut,
    UserDeletedOut,
    UserRef,
)
from tenantd.identity.cookies import clear_session_cookies
from tenantd.principal import current_principal
from tenantd.web.json import ok
from tenantd.web.schemas import Empty, Message
from tenantd.web.spec import Access, Routes

ROUTES = Routes("users")

# A "this wasn't me" link mailed with a notice: anyone holding it may use it (by its token).
THIS_WASNT_ME: dict[str, Any] = {"access": Access.PUBLIC, "body": LinkTokenBody}


@ROUTES.patch(
    "/api/v1/users/me",
    summary="Change my first and/or last name (single-line text; an empty string clears one)",
)
async def update_me(request: web.Request, body: ProfileBody) -> ProfileOut:
    names = await profile.update_names(
        auth_of(request.app),
        current_principal(request),
        first_name=body.first_name,
        last_name=body.last_name,
    )
    return ProfileOut(first_name=names.first_name, last_name=names.last_name)


@ROUTES.post(
    "/api/v1/users/me/email",
    status=202,
    responses={
        403: REAUTH_REQUIRED,
        429: "RATE_LIMITED (Retry-After): too many changes by this user or to this address",
    },
    summary="Change my email: a link goes to the new address, a notice to the old one",
)
async def request_email_change(request: web.Request, body: EmailChangeBody) -> Message:
    message = await email_change.request_change(
        auth_of(request.app), current_principal(request), new_email=body.new_email
    )
    return Message(message=message)


@ROUTES.post(
    "/api/v1/users/me/email/confirm",
    responses={409: "CONFLICT: another account took the address meanwhile"},
    summary="Confirm the new address with the token of its link; only then the email changes",
)
async def confirm_email_change(request: web.Request, body: LinkTokenBody) -> EmailChanged:
    changed = await email_change.confirm_change(
        auth_of(request.app), user_id=current_principal(request).user_id, token=body.token
    )
    return EmailChanged(user=UserRef(id=changed.user_id, email=changed.email))


@ROUTES.post(
    "/api/v1/auth/email-change/cancel",
    **THIS_WASNT_ME,
    summary='"This wasn\'t me" (link mailed to the old address): cancel or undo the change '
    "(the address comes back whatever came after) and end every session",
)
async def cancel_email_change(request: web.Request, body: LinkTokenBody) -> EmailChangeCancelled:
    done = await email_change.cancel_change(auth_of(request.app), token=body.token)
    return EmailChangeCancelled(restored=done.restored, kept=done.kept, message=done.message)


@ROUTES.post(
    "/api/v1/auth/security/undo",
    **THIS_WASNT_ME,
    summary='"This wasn\'t me" (link mailed with the notice of a sensitive action): undo it '
    "and end every session",
)
async def undo_sensitive_action(request: web.Request, body: LinkTokenBody) -> Empty:
    await security_undo.undo(auth_of(request.app), token=body.token)
    return Empty()


@ROUTES.delete(
    "/api/v1/users/me",
    response=UserDeletedOut,
    responses={
        403: REAUTH_REQUIRED,
        409: "TRANSFER_OWNERSHIP_FIRST (details.accountIds): you own an account with other members",
    },
    summary="Delete my user: memberships revoked, accounts I own alone soft-deleted, "
    "anonymised after 30 days",
)
async def delete_me(request: web.Request) -> web.Response:
    services = auth_of(request.app)
    done = await deletion.delete_user(services, current_principal(request))
    answer = UserDeletedOut.model_validate(done, from_attributes=True)
    response = ok(answer.model_dump(mode="json", by_alias=True))
    clear_session_cookies(response, services.settings)
    return response


@ROUTES.get(
    "/api/v1/users/me/export",
    summary="Export my data (user, identities, memberships, sessions, notifications, "
    "preferences, push subscriptions, email changes, my audit entries) as JSON",
)
async def export_me(request: web.Request) -> web.Response:
    exported = await deletion.export_user(
        auth_of(request.app), user_id=current_principal(request).user_id
    )
    response = ok(exported)
    response.headers["Content-Disposition"] = 'attachment; filename="tenantd-export.json"'
    return response
