"""Why a sign-in was refused. The callback turns these into `/login?error=<code>` redirects."""

from __future__ import annotations

import re

# Codes a login page can show (the `error` query parameter of the redirect).
STATE_INVALID = "oauth_state_invalid"  # missing, expired, tampered, mismatched or reused state
DENIED = "oauth_denied"  # the provider answered with an error (the user cancelled, ...)
FAILED = "oauth_failed"  # code exchange refused or the ID token did not verify
UNAVAILABLE = "oauth_unavailable"  # the provider could not be reached or is misconfigured
EMAIL_MISSING = "email_missing"  # the ID token carries no email (scope `email` missing)
EMAIL_NOT_VERIFIED = "email_not_verified"  # the provider does not vouch for the email
DOMAIN_CLAIMED = "domain_claimed"  # the domain belongs to another account; join request sent
IDENTITY_CONFLICT = "identity_conflict"  # the user already links another identity there
USER_DISABLED = "user_disabled"  # an operator disabled the user (issue 28)
SSO_REQUIRED = "sso_required"  # the user's domain signs in only through its SSO connection
# Step-up through the provider (GET /api/v1/auth/oauth/{provider}/reauth):
REAUTH_MISMATCH = "reauth_mismatch"  # another provider account than the one linked to the user
REAUTH_STALE = "reauth_stale"  # the ID token's auth_time predates the step-up request
REAUTH_SESSION = "reauth_session"  # the session that asked has ended meanwhile

# A provider's `error` code as we repeat it in a log or a reason (anything else is unreadable).
PROVIDER_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class OAuthRefused(Exception):
    """A sign-in attempt that must end without a session.

    `code` is shown to the browser; `reason` is a short internal detail for the log. Neither
    ever contains the authorization code, a token or the client secret.
    """

    def __init__(self, code: str, reason: str, *, params: dict[str, str] | None = None):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
        self.params = params or {}


class ProviderError(Exception):
    """The provider could not be used: network failure, bad metadata or an error answer."""


class TokenRefused(ProviderError):
    """The token endpoint refused the code (replayed, expired, PKCE or client mismatch)."""
