"""The user's own record: change of email address (and its "this wasn't me" link)."""

from __future__ import annotations

from aiohttp import web

from tenantd.auth import email_change
from tenantd.auth.schemas import EmailChangeBody, EmailChanged, LinkTokenBody, UserRef
from tenantd.principal import current_principal
from tenantd.services import SERVICES
from tenantd.web.schemas import Empty, Message
from tenantd.web.spec import Access, Routes

routes = Routes("users")


@routes.post(
    "/api/v1/users/me/email",
    body=EmailChangeBody,
    response=Message,
    status=202,
    summary="Change my email: a link goes to the new address, a notice to the old one",
)
async def request_email_change(request: web.Request, body: EmailChangeBody) -> Message:
    # TODO(mfa): step-up (REAUTH_REQUIRED) once the mfa helper's check is on main.
    message = await email_change.request_change(
        request.app[SERVICES], user_id=current_principal(request).user_id, new_email=body.new_email
    )
    return Message(message=message)


@routes.post(
    "/api/v1/users/me/email/confirm",
    body=LinkTokenBody,
    response=EmailChanged,
    responses={409: "CONFLICT: another account took the address meanwhile"},
    summary="Confirm the new address with the token of its link; only then the email changes",
)
async def confirm_email_change(request: web.Request, body: LinkTokenBody) -> EmailChanged:
    changed = await email_change.confirm_change(
        request.app[SERVICES], user_id=current_principal(request).user_id, token=body.token
    )
    return EmailChanged(user=UserRef(id=changed.user_id, email=changed.email))


@routes.post(
    "/api/v1/auth/email-change/cancel",
    access=Access.PUBLIC,
    body=LinkTokenBody,
    response=Empty,
    summary='"This wasn\'t me" (link mailed to the old address): cancel or undo the change and '
    "end every session",
)
async def cancel_email_change(request: web.Request, body: LinkTokenBody) -> Empty:
    await email_change.cancel_change(request.app[SERVICES], token=body.token)
    return Empty()
