"""Step-up's error: a dangerous action needs a recent authentication."""

from __future__ import annotations

from tenantd.errors import AppError, Forbidden


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


class Impersonation(AppError):
    """An operator's impersonation session may not perform sensitive actions."""

    status = 403
    code = "IMPERSONATION"
    message = "Not allowed while an operator is signed in as this user"
