"""Sign-up, sign-in and self-service errors, each on a generic kind of `tenantd.errors`.
(The OpenID Connect refusal codes are `tenantd.auth.oauth.errors`.)"""

from __future__ import annotations

from tenantd.errors import AppError, Conflict, Forbidden


class EmailNotVerified(Forbidden):
    code = "EMAIL_NOT_VERIFIED"
    message = "Verify your email address first"


class TransferOwnershipFirst(Conflict):
    code = "TRANSFER_OWNERSHIP_FIRST"
    message = "You own an account with other members: transfer its ownership or delete it first"


class CaptchaFailed(AppError):
    """A bot check was required and its token was missing or refused by the provider.
    (Not a ValidationFailed: it carries no `fields`, and no field handler may catch it.)"""

    status = 422
    code = "CAPTCHA_FAILED"
    message = "Complete the bot check and try again"
