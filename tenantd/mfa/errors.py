"""Errors of the MFA domain."""

from __future__ import annotations

from tenantd.errors import declare

# An operator's impersonation session may not perform sensitive actions (a plain 403: no
# handler of `Forbidden` may catch it).
(Impersonation,) = declare(
    __name__, (403, "IMPERSONATION", "Not allowed while an operator is signed in as this user")
)
