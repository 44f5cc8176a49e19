"""The database layer's error: the database does not answer."""

from __future__ import annotations

from tenantd.errors import ServiceUnavailable


class DatabaseUnavailable(ServiceUnavailable):
    """The database does not answer (down, restarting, or stalled): 503 with Retry-After,
    logged as one warning line, never as a traceback."""

    RETRY_AFTER_SECONDS = 5
    quiet_in_logs = True  # logging_setup.DatabaseOutage: a warning line, never a traceback

    def __init__(self, message: str | None = None):
        super().__init__(
            self.RETRY_AFTER_SECONDS, message or "The database is unavailable; try again shortly"
        )
