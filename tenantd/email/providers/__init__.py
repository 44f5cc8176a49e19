"""Email senders behind one protocol, chosen by EMAIL_PROVIDER."""

from __future__ import annotations

from typing import Protocol

from tenantd.email.message import EmailMessage


class EmailSender(Protocol):
    name: str

    async def send(self, message: EmailMessage, *, sender: str) -> str | None:
        """Deliver one message; return the provider's message id.

        Raises EmailSendError or RecipientSuppressed.
        """
        ...
