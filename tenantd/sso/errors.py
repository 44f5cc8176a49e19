"""SSO's errors: a domain another connection or account holds, and why a browser sign-in
through a connection was refused (the redirect's `error` code)."""

from __future__ import annotations

from tenantd.errors import Conflict

# Codes a login page can show (`/login?error=<code>`), beside auth/oauth/errors.py's.
SAML_INVALID = "sso_response_invalid"  # unsigned, wrong key, audience, time, wrapping, ...
SAML_REPLAYED = "sso_response_replayed"  # an assertion or a request answered before
UNSOLICITED = "sso_unsolicited"  # no request of ours answered (IdP-initiated is off)
DOMAIN_MISMATCH = "sso_domain_mismatch"  # the address is not in the connection's domains
IDENTITY_CONFLICT = "sso_identity_conflict"  # an existing user this account has no hold on
SEAT_LIMIT = "seat_limit_reached"  # just-in-time membership found no free seat
EMAIL_MISSING = "email_missing"  # no usable address in the assertion or ID token
USER_DISABLED = "user_disabled"


class DomainTaken(Conflict):
    code = "SSO_DOMAIN_TAKEN"
    message = "This domain belongs to another single sign-on connection or account"

    def __init__(self, domain: str, reason: str):
        super().__init__(f"{domain}: {reason}", details={"domain": domain, "field": "domains"})


class SsoRefused(Exception):
    """A browser sign-in through a connection that ends without a session: `code` is shown,
    `reason` only logged."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
