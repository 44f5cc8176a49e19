"""The email send path: the suppression list it is handed (`Blocklist`, tenantd/suppression)
is consulted before any provider is touched, and a keyed message is sent at most once where
the provider allows it.

Idempotency (issue 26): a message carries a key that is the same on every run of the job that
sends it (a notification delivery's id, or the mail job's id through `job_mail_key`). A
provider that honours the key itself (Resend's `Idempotency-Key`, the `file` provider) gets it
and sends once per key, even for a call in flight at a crash. For the others (Postmark,
SendGrid, SMTP) a sent-marker is committed `sending` before the provider call and `sent` once
it answered; a run that finds `sent` does not call the provider again. What can still repeat:
a call whose answer was never recorded (the process died while the provider was sending, or
between its answer and the marker's one-row update): at most the calls in flight at the crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from tenantd.db import Conn, Database, Row
from tenantd.email import queries, templates
from tenantd.email.message import (
    EmailMessage,
    EmailSendError,
    RecipientSuppressed,
    SendResult,
    keyed,
)
from tenantd.email.providers import EmailSender
from tenantd.email.providers.file import FileSender
from tenantd.email.providers.http import build_http_sender
from tenantd.email.settings import MailSettings
from tenantd.jobs.kinds import PermanentJobError
from tenantd.settings import Settings

log = logging.getLogger(__name__)

# Writing a sent-marker after the provider accepted: 5 tries over about 8 seconds.
MARK_ATTEMPTS = 5
MARK_RETRY_SECONDS = 0.25


def build_sender(settings: Settings, http: aiohttp.ClientSession) -> EmailSender:
    if settings.section(MailSettings).email_provider == "file":
        return FileSender(settings.section(MailSettings).email_file_dir)
    return build_http_sender(settings, http)


class Blocklist(Protocol):
    """The addresses no mail goes to (tenantd/suppression/service.py is the one)."""

    async def find(self, conn: Conn, email: str) -> Row | None: ...

    async def add_many(
        self, conn: Conn, rows: Iterable[tuple[str, str, dict[str, Any]]], *, provider: str
    ) -> list[Row]: ...


@dataclass
class EmailService:
    db: Database
    sender: EmailSender
    sender_address: str
    blocklist: Blocklist
    brand: templates.Brand = field(default_factory=templates.Brand)  # send_template's layout

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        db: Database,
        http: aiohttp.ClientSession,
        blocklist: Blocklist,
    ) -> EmailService:
        return cls(
            db=db,
            sender=build_sender(settings, http),
            sender_address=settings.section(MailSettings).email_from,
            blocklist=blocklist,
            brand=templates.brand_of(settings),
        )

    async def send(self, message: EmailMessage) -> SendResult:
        """Send unless the address is suppressed: then {status: suppressed, reason}."""
        message = keyed(message)
        async with self.db.connection() as conn:
            row = await self.blocklist.find(conn, message.to)
        if row is not None:
            log.info("email to suppressed address skipped", extra={"reason": row["reason"]})
            return SendResult(status="suppressed", reason=row["reason"])
        key = message.idempotency_key
        marked = key is not None and not getattr(self.sender, "honours_key", False)
        if marked:
            async with self.db.connection() as conn:
                mark = await conn.fetch_one(
                    queries.SEND_MARK, {"key": key, "provider": self.sender.name}
                )
            if mark is not None and mark["state"] == "sent":
                log.info(
                    "email already sent under this key; not sent again",
                    extra={"provider": self.sender.name, "tag": message.tag},
                )
                return SendResult(status="sent", message_id=mark["message_id"])
        try:
            message_id = await self.sender.send(message, sender=self.sender_address)
        except RecipientSuppressed as refused:
            await self._mirror(refused, message.to)
            return SendResult(status="suppressed", reason=refused.reason)
        if marked:
            await self._mark_sent(str(key), message_id)
        return SendResult(status="sent", message_id=message_id)

    async def _mark_sent(self, key: str, message_id: str | None) -> None:
        """Put the provider's acceptance on record. A database away for a moment (a restart)
        is waited for a few seconds: a mark not written means the next run sends again."""
        for attempt in range(MARK_ATTEMPTS):
            try:
                async with self.db.connection() as conn:
                    await conn.execute(queries.SENT_MARK, {"key": key, "message_id": message_id})
                return
            except Exception as error:
                if attempt == MARK_ATTEMPTS - 1:
                    raise
                log.warning(
                    "recording a sent email failed; trying again: %s",
                    type(error).__name__,
                    extra={"provider": self.sender.name},
                )
                await asyncio.sleep(MARK_RETRY_SECONDS * 2**attempt)

    async def send_from_job(self, message: EmailMessage) -> SendResult:
        """`send` for a mail job: a provider failure a retry may fix propagates, so the durable
        queue retries the job; a permanent refusal ends the job (PermanentJobError); a
        suppressed recipient is a result, and the job is done."""
        try:
            return await self.send(message)
        except EmailSendError as error:
            if not error.retryable:
                raise PermanentJobError(str(error)) from error
            raise

    async def _mirror(self, refused: RecipientSuppressed, recipient: str) -> None:
        """Record the provider's send-time verdict in the local list (one statement)."""
        details = {"source": "send"}
        rows = [(a, refused.reason, details) for a in refused.addresses or [recipient]]
        async with self.db.connection() as conn:
            recorded = await self.blocklist.add_many(conn, rows, provider=refused.provider)
        for row in recorded:
            log.info(
                "email suppression recorded",
                extra={
                    "provider": refused.provider,
                    "reason": row["reason"],
                    "email": row["email"],
                },
            )

    async def send_template(
        self, *, to: str, template: str, variables: dict[str, Any], tag: str | None = None
    ) -> SendResult:
        """Render a shipped transactional template and send it."""
        subject, text, html = templates.render(template, variables, brand=self.brand)
        return await self.send(
            EmailMessage(to=to, subject=subject, text=text, html=html, tag=tag or template)
        )
