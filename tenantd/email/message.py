"""What the email service sends and what a send returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

# What may not stand in a header value: every character Python's email package (or a
# provider) takes as a line break or refuses (C0, DEL, C1 with U+0085, U+2028, U+2029).
_HEADER_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def header_text(value: str) -> str:
    """One line for a header: any run of line breaks or control characters becomes a space."""
    return _HEADER_BREAKS.sub(" ", value).strip()


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

    def __post_init__(self) -> None:
        # A subject or header built from a user's text (a name, an account name, even one
        # stored before such characters were refused) never fails the send nor adds a header.
        object.__setattr__(self, "subject", header_text(self.subject))
        if self.headers:
            cleaned = {header_text(k): header_text(v) for k, v in self.headers.items()}
            object.__setattr__(self, "headers", cleaned)


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
