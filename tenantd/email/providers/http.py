"""HTTP email providers (Postmark, Resend, SendGrid) are chosen here by EMAIL_PROVIDER."""

from __future__ import annotations

import aiohttp

from tenantd.email.providers import EmailSender
from tenantd.settings import Settings


def build_http_sender(settings: Settings, http: aiohttp.ClientSession) -> EmailSender:
    raise NotImplementedError(f"EMAIL_PROVIDER={settings.email_provider} is not available yet")
