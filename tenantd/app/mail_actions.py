"""The one list of actions that send mail to an address their caller chooses (issue 25).

Each is limited per acting user and per recipient inside the action itself
(`tenantd.ops.ratelimit.limit_chosen_recipient`, with the scope named here and its numbers in
`tenantd.ops.config.MAIL_RATE_LIMITS`), so the API view, the hosted page, the JS client and any
route added later are limited alike: over a limit the action raises RateLimited (429
`RATE_LIMITED` with `Retry-After`) and mails nothing. A test walks every route of the route table
(API and pages) and drives each one that reaches an action here past its limit.

Sign-up, resending a verification link and asking for a password reset mail an address an
anonymous caller types: there is no acting user to count, so they are limited per client IP
and per address by their scope (`ANONYMOUS_MAIL_ACTIONS`), counted by the API route and by
the hosted page before either calls the action. The same
route walk drives every route that reaches one of them past its limit, so a new route cannot
forget it either. Mail to the signed-in user's own verified address (notices, new sign-in)
is on neither list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenantd.accounts import invitations
from tenantd.auth import email_change
from tenantd.auth import service as auth_service

MAIL_ACTIONS: dict[str, tuple[Callable[..., Any], ...]] = {
    email_change.MAIL_SCOPE: (email_change.request_change,),
    invitations.MAIL_SCOPE: (invitations.create_invitation, invitations.resend_invitation),
}

# Scope (per IP and per address, `tenantd.ops.config.DEFAULT_RATE_LIMITS`) -> actions.
ANONYMOUS_MAIL_ACTIONS: dict[str, tuple[Callable[..., Any], ...]] = {
    "register": (auth_service.register,),
    "resend_verification": (auth_service.resend_verification,),
    "password_reset": (auth_service.request_password_reset,),
}
