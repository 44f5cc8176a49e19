"""What the email service sends and what a send returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class EmailMessage:
    to: str
    subject: str
    text: str
    html: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tag: str | None = None  # e.g. "verify_email", "notification"
    # The same for every send of one delivery (its id), so a re-run job cannot mail twice
    # where the provider honours it (Resend); None: a fresh key per send.
    idempotency_key: str | None = None


@dataclass(frozen=True)
class SendResult:
    status: Literal["sent", "suppressed"]
    reason: str | None = None
    message_id: str | None = None


class EmailSendError(Exception):
    """The provider did not accept the message (after retries, or a 4xx that retries won't fix)."""

    def __init__(self, message: str, *, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


class RecipientSuppressed(Exception):
    """The provider refused the recipients as suppressed (Postmark 406); mirror them locally."""

    def __init__(self, addresses: list[str], *, reason: str, provider: str):
        super().__init__(f"{provider}: recipient suppressed ({reason})")
        self.addresses = addresses
        self.reason = reason
        self.provider = provider
