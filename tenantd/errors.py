"""The generic kinds of error; each domain defines its own on them (`<domain>/errors.py`).
Services raise them; one middleware turns every `AppError` into the error envelope."""

from __future__ import annotations

from typing import Any, cast


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


class Forbidden(AppError):
    status = 403
    code = "FORBIDDEN"
    message = "You are not allowed to do this"


class NotFound(AppError):
    status = 404
    code = "NOT_FOUND"
    message = "Not found"


class Conflict(AppError):
    status = 409
    code = "CONFLICT"
    message = "Conflict"


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


def declare(
    module: str, *rows: tuple[type[AppError] | int, str, str]
) -> tuple[type[AppError], ...]:
    """A domain's errors from one table, in the order of its rows. A row is (kind, code, message):
    the kind a generic class of this module, or an HTTP status for a plain `AppError` (one no
    handler of a generic kind may catch); the class is named after its code (SEAT_LIMIT_REACHED
    -> SeatLimitReached) and belongs to `module`, which binds it to that name."""
    declared = []
    for kind, code, message in rows:
        base, status = (AppError, {"status": kind}) if isinstance(kind, int) else (kind, {})
        name = "".join(part.capitalize() for part in code.split("_"))
        attrs = {"__module__": module, "code": code, "message": message, **status}
        declared.append(cast(type[AppError], type(name, (base,), attrs)))
    return tuple(declared)
