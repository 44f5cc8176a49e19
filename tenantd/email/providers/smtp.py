"""The `smtp` provider: any SMTP submission server (Postfix, Amazon SES SMTP, Mailgun, ...).

`SMTP_URL=smtp://user:pass@host:587` speaks STARTTLS before authenticating (refused when the
server does not offer it), `SMTP_STARTTLS=false` sends in clear text (a local relay on
port 25), and `smtps://...:465` uses TLS from the first byte. `SMTP_CA_FILE` names extra
trusted certificates (a private CA).

A recipient refused with a permanent status (5xx with an enhanced 5.1.x address status, or
550/551/553 without one) is raised as RecipientSuppressed (reason `hard_bounce`, provider
`smtp`) so the service mirrors it into the suppression list, as Postmark's 406 is. Transient
4xx answers and lost connections are retried a few times, then left to the job queue.
The password never reaches a log line or an error message.
"""

from __future__ import annotations

import email.utils
import logging
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import aiosmtplib

from tenantd.addresses import normalize_email
from tenantd.email.message import EmailMessage, EmailSendError, RecipientSuppressed
from tenantd.email.providers.file import build_mime
from tenantd.email.providers.retry import RetryPolicy

log = logging.getLogger(__name__)

PROVIDER = "smtp"
SCHEMES = {"smtp": 587, "smtps": 465}
# An enhanced status code at the start of a reply (RFC 3463): class.subject.detail.
_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")
# Permanent statuses about the address itself (bad mailbox, bad domain, mailbox disabled).
_ADDRESS_SUBJECT = "1"
_DISABLED_MAILBOX = ("2", "1")
_PERMANENT_WITHOUT_ENHANCED = {550, 551, 553}


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to submit: parsed once from SMTP_URL (the password stays in here)."""

    host: str
    port: int
    implicit_tls: bool
    username: str | None
    password: str | None

    def __repr__(self) -> str:  # never print the password
        return f"SmtpTarget({self.host}:{self.port}, tls={self.implicit_tls})"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> SmtpTarget:
    """`smtp[s]://[user[:password]@]host[:port]`; a ValueError names the problem, not the URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in SCHEMES:
        raise ValueError("SMTP_URL must start with smtp:// or smtps://")
    try:
        port = parts.port or SCHEMES[parts.scheme]
    except ValueError:
        raise ValueError("SMTP_URL has a malformed port") from None
    if not parts.hostname:
        raise ValueError("SMTP_URL has no host")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and not username:
        raise ValueError("SMTP_URL has a password without a user name")
    return SmtpTarget(
        host=parts.hostname,
        port=port,
        implicit_tls=parts.scheme == "smtps",
        username=username,
        password=password,
    )


def is_permanent_address_refusal(code: int, text: str) -> bool:
    """550 5.1.1 and friends: the address does not exist or takes no mail, for good."""
    if code < 500 or code >= 600:
        return False
    enhanced = _ENHANCED.match(text)
    if enhanced is not None:
        subject, detail = enhanced.group(2), enhanced.group(3)
        return enhanced.group(1) == "5" and (
            subject == _ADDRESS_SUBJECT or (subject, detail) == _DISABLED_MAILBOX
        )
    return code in _PERMANENT_WITHOUT_ENHANCED


def _reply(error: aiosmtplib.SMTPResponseException) -> str:
    return f"{error.code} {error.message}"[:300]


class SmtpSender:
    name = PROVIDER
    # SMTP has no idempotency key: the email service keeps a sent-marker. The key still makes
    # the Message-ID, so a message sent again is recognisably the same one.
    honours_key = False

    def __init__(
        self,
        target: SmtpTarget,
        *,
        starttls: bool = True,
        ca_file: str | None = None,
        retry: RetryPolicy | None = None,
        local_hostname: str | None = None,
    ):
        self.target = target
        self.starttls = starttls
        self.ca_file = ca_file
        self.retry = retry or RetryPolicy()
        self.local_hostname = local_hostname

    def _client(self) -> aiosmtplib.SMTP:
        implicit = self.target.implicit_tls
        return aiosmtplib.SMTP(
            hostname=self.target.host,
            port=self.target.port,
            username=self.target.username,
            password=self.target.password,
            use_tls=implicit,
            # True: STARTTLS is required (no silent downgrade); False: never attempted.
            start_tls=False if implicit else self.starttls,
            cert_bundle=self.ca_file,
            timeout=self.retry.timeout,
            local_hostname=self.local_hostname,
        )

    async def _submit(self, message: EmailMessage, *, sender: str, message_id: str) -> None:
        mime = build_mime(message, sender=sender, message_id=message_id)
        client = self._client()
        async with client:
            await client.send_message(mime, recipients=[message.to])

    async def send(self, message: EmailMessage, *, sender: str) -> str | None:
        message_id = (
            f"<{message.idempotency_key}@tenantd>"
            if message.idempotency_key
            else email.utils.make_msgid(domain="tenantd")
        )
        failure = ""
        for attempt in range(1, self.retry.attempts + 1):
            if attempt > 1:
                await self.retry.sleep(self.retry.delay(attempt - 1))
            try:
                await self._submit(message, sender=sender, message_id=message_id)
            except aiosmtplib.SMTPRecipientsRefused as refused:
                failure = self._recipients_refused(refused, message)
            except aiosmtplib.SMTPAuthenticationError as error:
                # Wrong credentials do not fix themselves; the reply never holds the password.
                raise EmailSendError(
                    f"smtp: authentication refused by {self.target.where}: {error.code}",
                    retryable=False,
                ) from None
            except aiosmtplib.SMTPNotSupported as error:
                raise EmailSendError(f"smtp: {error}", retryable=False) from None
            except aiosmtplib.SMTPResponseException as error:
                if not 400 <= error.code < 500:
                    raise EmailSendError(f"smtp: {_reply(error)}", retryable=False) from None
                failure = _reply(error)
            except aiosmtplib.SMTPException as error:
                if type(error) is aiosmtplib.SMTPException:
                    # The bare class is a refused capability (STARTTLS or AUTH not offered):
                    # no downgrade, no retry. Its text names the capability, never credentials.
                    raise EmailSendError(
                        f"smtp: {self.target.where}: {error}", retryable=False
                    ) from None
                failure = f"transport error {type(error).__name__}"
            except (OSError, TimeoutError) as error:
                # Connection refused, TLS failure, timeout, STARTTLS missing: named by type.
                failure = f"transport error {type(error).__name__}"
            else:
                return message_id
            log.warning(
                "email provider attempt failed",
                extra={"provider": PROVIDER, "attempt": attempt, "failure": failure},
            )
        raise EmailSendError(
            f"smtp: gave up after {self.retry.attempts} attempts ({failure})", retryable=True
        )

    def _recipients_refused(
        self, refused: aiosmtplib.SMTPRecipientsRefused, message: EmailMessage
    ) -> str:
        """Raise for a permanent refusal; return the transient reply to retry on."""
        permanent = [
            r for r in refused.recipients if is_permanent_address_refusal(r.code, r.message)
        ]
        if permanent:
            raise RecipientSuppressed(
                [normalize_email(r.recipient) for r in permanent] or [normalize_email(message.to)],
                reason="hard_bounce",
                provider=PROVIDER,
            )
        first = refused.recipients[0] if refused.recipients else None
        if first is not None and not 400 <= first.code < 500:
            raise EmailSendError(f"smtp: recipient refused: {_reply(first)}", retryable=False)
        return _reply(first) if first is not None else "recipients refused"
