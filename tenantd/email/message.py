"""What the email service sends and what a send returns."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterator
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
    # The same for every send of one delivery (a notification delivery's id, a mail job's id),
    # so a job run again cannot mail twice (tenantd/email/service.py); None: unkeyed.
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


@dataclass
class _JobKey:
    base: str
    sent: int = 0


_JOB_KEY: contextvars.ContextVar[_JobKey | None] = contextvars.ContextVar(
    "tenantd_job_mail_key", default=None
)


@contextlib.contextmanager
def job_mail_key(job_id: int | None, kind: str) -> Iterator[None]:
    """Mail sent inside is keyed by this durable job (`<kind>/<job id>/<n>`, n counting the
    job's mails): a run again after a crash sends the same keys. Nothing for an inline job
    (no id: it does not survive a crash anyway)."""
    token = _JOB_KEY.set(_JobKey(f"{kind}/{job_id}") if job_id is not None else None)
    try:
        yield
    finally:
        _JOB_KEY.reset(token)


def keyed(message: EmailMessage) -> EmailMessage:
    """The message with its job's key when it has none of its own and runs in a job."""
    if message.idempotency_key is not None:
        return message
    job = _JOB_KEY.get()
    if job is None:
        return message
    job.sent += 1
    return dataclasses.replace(message, idempotency_key=f"{job.base}/{job.sent}")
