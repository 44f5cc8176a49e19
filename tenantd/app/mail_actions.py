"""The one list of actions that send mail to an address their caller chooses (issue 25).

Each is limited per acting user and per recipient inside the action itself
(`tenantd.ops.ratelimit.limit_chosen_recipient`, with the scope named here and its numbers in
`tenantd.ops.config.MAIL_RATE_LIMITS`), so the API view, the hosted page, the JS client and any
route added later are limited alike: over a limit the action raises RateLimited (429
`RATE_LIMITED` with `Retry-After`) and mails nothing. A test walks every route of both routers
and drives each one that reaches an action here past its limit.

Mail whose recipient is the signed-in user's own verified address (notices, new sign-in) or
the address that asked for it (sign-up, resend, reset: limited per IP and per address at
their routes and pages) is not on this list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenantd.accounts import invitations
from tenantd.auth import email_change

MAIL_ACTIONS: dict[str, tuple[Callable[..., Any], ...]] = {
    email_change.MAIL_SCOPE: (email_change.request_change,),
    invitations.MAIL_SCOPE: (invitations.create_invitation, invitations.resend_invitation),
}
