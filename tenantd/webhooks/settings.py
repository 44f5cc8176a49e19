"""The outbound webhooks' settings section."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator

from tenantd.settings import Flag, Seconds, Section, at_least, env

SEND_BUDGET_SECONDS = 45.0
# A bound on how long sending takes (one request, or one job's deliveries), in seconds.
SendBound = Annotated[float, BeforeValidator(at_least(0.1))]


class WebhookSettings(Section):
    """Deliveries of outbox events to the endpoints applications register."""

    title: ClassVar[str] = "Outbound webhooks"

    webhook_retry_base_seconds: Seconds = env(
        "TENANTD_WEBHOOK_RETRY_BASE_SECONDS",
        "First retry of a failed delivery after this many seconds (+-20% jitter), doubling"
        " each time; a delivery is retried for up to 3 days, an endpoint failing for 5 days is"
        " disabled.",
        default=30.0,
    )
    webhook_timeout_seconds: SendBound = env(
        "TENANTD_WEBHOOK_TIMEOUT_SECONDS",
        "Per delivery request (connect, send, answer); redirects are never followed.",
        default=10.0,
    )
    webhook_send_budget_seconds: SendBound = env(
        "TENANTD_WEBHOOK_SEND_BUDGET_SECONDS",
        "One delivery job sends for at most this long (a delivery starts only if its whole"
        " timeout still fits); what is left goes to a new job at once. Also the cap.",
        default=SEND_BUDGET_SECONDS,
    )
    webhook_refuse_private: Flag = env(
        "TENANTD_WEBHOOK_REFUSE_PRIVATE",
        "true: endpoints must resolve to public addresses (no loopback, RFC 1918, link-local,"
        " in any IPv6 form). Metadata addresses (169.254.169.254 and its IPv6 forms) are"
        " always refused.",
        default=False,
    )
