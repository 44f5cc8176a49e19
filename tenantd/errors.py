"""Domain errors. Services raise these; one middleware turns them into the error envelope."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """An error with an HTTP status and a stable machine-readable code."""

    status = 500
    code = "INTERNAL"
    message = "Internal server error"

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None):
        super().__init__(message or self.message)
        self.message = message or self.message
        self.details = details


class Unauthorized(AppError):
    status = 401
    code = "UNAUTHORIZED"
    message = "Authentication required"

    def __init__(self, reason: str, message: str | None = None):
        super().__init__(message, details={"reason": reason})
        self.reason = reason


class InvalidCredentials(AppError):
    status = 401
    code = "INVALID_CREDENTIALS"
    message = "Email or password is incorrect"


class EmailNotVerified(AppError):
    status = 403
    code = "EMAIL_NOT_VERIFIED"
    message = "Verify your email address first"


class Forbidden(AppError):
    status = 403
    code = "FORBIDDEN"
    message = "You are not allowed to do this"


class FeatureNotEnabled(AppError):
    status = 403
    code = "FEATURE_NOT_ENABLED"
    message = "This feature is not enabled for the account"


class NotFound(AppError):
    status = 404
    code = "NOT_FOUND"
    message = "Not found"


class Conflict(AppError):
    status = 409
    code = "CONFLICT"
    message = "Conflict"


class DomainClaimed(AppError):
    status = 409
    code = "DOMAIN_CLAIMED"
    # The requester learns here (and by email) that the owner and admins will see the address.
    message = (
        "This email domain is claimed by another account; a request to join it is pending."
        " Your email address is shown to that account's owner and admins, who approve or deny"
        " the request. Until then you cannot create a separate account."
    )


class SeatLimitReached(AppError):
    status = 409
    code = "SEAT_LIMIT_REACHED"
    message = "The account has no free seat"


class OwnerCannotLeave(AppError):
    status = 409
    code = "OWNER_CANNOT_LEAVE"
    message = "The owner cannot leave; transfer ownership or delete the account"


class InvitationRevoked(AppError):
    status = 410
    code = "INVITATION_REVOKED"
    message = "This invitation was revoked"


class InvitationExpired(AppError):
    status = 410
    code = "INVITATION_EXPIRED"
    message = "This invitation has expired"


class InvitationAlreadyUsed(AppError):
    status = 410
    code = "INVITATION_ALREADY_USED"
    message = "This invitation was already used"


class PayloadTooLarge(AppError):
    status = 413
    code = "PAYLOAD_TOO_LARGE"
    message = "Request body is too large"


class UnsupportedMediaType(AppError):
    status = 415
    code = "UNSUPPORTED_MEDIA_TYPE"
    message = "Request body must be application/json"


class ValidationFailed(AppError):
    status = 422
    code = "VALIDATION_ERROR"
    message = "Request is invalid"

    def __init__(self, fields: dict[str, str], message: str | None = None):
        super().__init__(message, details={"fields": fields})
        self.fields = fields


class RateLimited(AppError):
    status = 429
    code = "RATE_LIMITED"
    message = "Too many requests; try again later"

    def __init__(self, retry_after: int, message: str | None = None):
        super().__init__(message, details={"retryAfter": retry_after})
        self.retry_after = retry_after


class ServiceUnavailable(AppError):
    status = 503
    code = "SERVICE_UNAVAILABLE"
    message = "The service is at capacity; try again later"

    def __init__(self, retry_after: int, message: str | None = None):
        super().__init__(message, details={"retryAfter": retry_after})
        self.retry_after = retry_after


class DatabaseUnavailable(ServiceUnavailable):
    """The database does not answer (down, restarting, or stalled): 503 with Retry-After,
    logged as one warning line, never as a traceback."""

    RETRY_AFTER_SECONDS = 5
    quiet_in_logs = True  # logging_setup.DatabaseOutage: a warning line, never a traceback

    def __init__(self, message: str | None = None):
        super().__init__(
            self.RETRY_AFTER_SECONDS, message or "The database is unavailable; try again shortly"
        )


class MfaRequired(AppError):
    """The account requires multi-factor authentication and the user has no factor yet."""

    status = 403
    code = "MFA_REQUIRED"
    message = "This account requires multi-factor authentication: enrol a factor first"


class ReauthRequired(AppError):
    """A dangerous action needs a recent authentication (POST /api/v1/auth/reauth)."""

    status = 403
    code = "REAUTH_REQUIRED"
    message = "Confirm it is you: authenticate again to continue"

    def __init__(
        self, methods: list[str], message: str | None = None, *, providers: list[str] | None = None
    ):
        # `providers`: where the `provider` method goes (GET /api/v1/auth/oauth/{p}/reauth).
        super().__init__(message, details={"methods": methods, "providers": providers or []})
        self.methods = methods


# -- Beyond (issue 18): account restore -------------------------------------------------------


class AccountPurged(AppError):
    status = 410
    code = "ACCOUNT_PURGED"
    message = "The account's grace period is over; it was (or is being) deleted for good"


class DomainTaken(AppError):
    status = 409
    code = "DOMAIN_TAKEN"
    message = "Another account claimed this account's email domain after it was deleted"


class AccountNotDeleted(AppError):
    status = 409
    code = "ACCOUNT_NOT_DELETED"
    message = "The account is not deleted"


class TransferOwnershipFirst(AppError):
    status = 409
    code = "TRANSFER_OWNERSHIP_FIRST"
    message = "You own an account with other members: transfer its ownership or delete it first"


# -- Sign-in breadth (issue 29) ----------------------------------------------------------------


class CaptchaFailed(AppError):
    """A bot check was required and its token was missing or refused by the provider."""

    status = 422
    code = "CAPTCHA_FAILED"
    message = "Complete the bot check and try again"


# -- Operators (issue 28) ------------------------------------------------------------------------


class UserDisabled(AppError):
    """An operator disabled the user: every sign-in path and every renewal is refused."""

    status = 403
    code = "USER_DISABLED"
    message = "This user is disabled"


class Impersonation(AppError):
    """An operator's impersonation session may not perform sensitive actions."""

    status = 403
    code = "IMPERSONATION"
    message = "Not allowed while an operator is signed in as this user"
