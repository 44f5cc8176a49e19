"""Signed provider webhooks: verify the raw body, skip seen event ids, record verdicts."""

from __future__ import annotations

from tenantd.settings import Settings, SettingsError
from tenantd.suppression.webhooks import resend, sendgrid


def check_settings(settings: Settings) -> None:
    """Refuse to start with a webhook secret or key that could never verify anything."""
    try:
        if settings.resend_webhook_secret:
            resend.signing_key(settings.resend_webhook_secret)
        if settings.sendgrid_webhook_public_key:
            sendgrid.public_key(settings.sendgrid_webhook_public_key)
    except ValueError as error:
        raise SettingsError(str(error)) from None
