"""Errors of the MFA domain."""

from __future__ import annotations

from tenantd.errors import AppError


class Impersonation(AppError):
    """An operator's impersonation session may not perform sensitive actions."""

    status = 403
    code = "IMPERSONATION"
    message = "Not allowed while an operator is signed in as this user"
