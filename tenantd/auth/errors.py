"""Sign-up, sign-in and self-service errors, each on a generic kind of `tenantd.errors`.
(The OpenID Connect refusal codes are `tenantd.auth.oauth.errors`.)"""

from __future__ import annotations

from tenantd.errors import Conflict, Forbidden, declare

EmailNotVerified, TransferOwnershipFirst, CaptchaFailed = declare(
    __name__,
    (Forbidden, "EMAIL_NOT_VERIFIED", "Verify your email address first"),
    (
        Conflict,
        "TRANSFER_OWNERSHIP_FIRST",
        "You own an account with other members: transfer its ownership or delete it first",
    ),
    # A bot check was required and its token was missing or refused by the provider. A plain
    # 422, not a ValidationFailed: it carries no `fields`, and no field handler may catch it.
    (422, "CAPTCHA_FAILED", "Complete the bot check and try again"),
)
