"""Email senders behind one protocol, chosen by EMAIL_PROVIDER."""

from __future__ import annotations

from typing import Protocol

from tenantd.email.message import EmailMessage


class EmailSender(Protocol):
    """A provider. One whose class sets `honours_key = True` sends a message once per
    `idempotency_key` itself; the email service keeps a sent-marker for the others."""

    name: str

    async def send(self, message: EmailMessage, *, sender: str) -> str | None:
        """Deliver one message; return the provider's message id.

        Raises EmailSendError or RecipientSuppressed.
        """
        ...
