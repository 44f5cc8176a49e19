"""Who-the-caller-is errors: a refused secret, a missing second factor, a stale sign-in."""

from __future__ import annotations

from tenantd.errors import Forbidden, declare

# InvalidCredentials: 401 without the `reason` of `Unauthorized` (which callers catch to mean
# "the token no longer holds"): a password or code was wrong. MfaRequired: the account requires
# multi-factor authentication and the user has no factor yet. UserDisabled: an operator disabled
# the user, every sign-in path and every renewal is refused (a plain 403). SsoRequired: the
# user's email domain belongs to an account's SSO connection with `enforce` on, only that
# connection signs them in (password, email code, passkey and social sign-in are refused);
# `details` names the connection and where its sign-in starts.
InvalidCredentials, MfaRequired, UserDisabled, SsoRequired = declare(
    __name__,
    (401, "INVALID_CREDENTIALS", "Email or password is incorrect"),
    (
        Forbidden,
        "MFA_REQUIRED",
        "This account requires multi-factor authentication: enrol a factor first",
    ),
    (403, "USER_DISABLED", "This user is disabled"),
    (
        Forbidden,
        "SSO_REQUIRED",
        "Your organisation requires single sign-on: sign in through its identity provider",
    ),
)


class ReauthRequired(Forbidden):
    """A dangerous action needs a recent authentication (POST /api/v1/auth/reauth)."""

    code = "REAUTH_REQUIRED"
    message = "Confirm it is you: authenticate again to continue"

    def __init__(
        self, methods: list[str], message: str | None = None, *, providers: list[str] | None = None
    ):
        # `providers`: where the `provider` method goes (GET /api/v1/auth/oauth/{p}/reauth).
        super().__init__(message, details={"methods": methods, "providers": providers or []})
        self.methods = methods
