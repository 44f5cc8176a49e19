"""The network email providers (Postmark, Resend, SendGrid, SMTP) are chosen here by
EMAIL_PROVIDER."""

from __future__ import annotations

import aiohttp

from tenantd.email.providers import EmailSender
from tenantd.email.providers.api import ApiKeySender
from tenantd.email.providers.postmark import PostmarkSender
from tenantd.email.providers.resend import ResendSender
from tenantd.email.providers.retry import RetryPolicy
from tenantd.email.providers.sendgrid import SendGridSender
from tenantd.email.providers.smtp import SmtpSender, parse_url
from tenantd.email.settings import MailSettings
from tenantd.settings import Settings, SettingsError


def build_http_sender(
    settings: Settings, http: aiohttp.ClientSession, *, retry: RetryPolicy | None = None
) -> EmailSender:
    """The sender of EMAIL_PROVIDER; a missing API key stops start-up with a clear error."""
    mail = settings.section(MailSettings)
    provider = mail.email_provider
    if provider == "postmark":
        token = mail.postmark_server_token
        if not token:
            raise SettingsError("EMAIL_PROVIDER=postmark requires POSTMARK_SERVER_TOKEN")
        return PostmarkSender(
            http,
            token=token,
            base_url=mail.postmark_api_url,
            retry=retry,
        )
    keyed: dict[str, tuple[type[ApiKeySender], str | None, str]] = {
        "resend": (
            ResendSender,
            mail.resend_api_key,
            mail.resend_api_url,
        ),
        "sendgrid": (
            SendGridSender,
            mail.sendgrid_api_key,
            mail.sendgrid_api_url,
        ),
    }
    if provider in keyed:
        sender, api_key, base_url = keyed[provider]
        if not api_key:
            raise SettingsError(f"EMAIL_PROVIDER={provider} requires {provider.upper()}_API_KEY")
        return sender(http, api_key=api_key, base_url=base_url, retry=retry)
    if provider == "smtp":
        url = mail.smtp_url
        if not url:
            raise SettingsError("EMAIL_PROVIDER=smtp requires SMTP_URL")
        try:
            target = parse_url(url)
        except ValueError as error:
            raise SettingsError(str(error)) from None
        return SmtpSender(
            target,
            starttls=mail.smtp_starttls,
            ca_file=mail.smtp_ca_file,
            retry=retry,
        )
    raise SettingsError(f"unknown EMAIL_PROVIDER {provider!r}")
