"""Signed provider webhooks: verify the raw body, skip seen event ids, record verdicts."""

from __future__ import annotations

from tenantd.email.settings import MailVerdictSettings
from tenantd.settings import Settings, SettingsError
from tenantd.suppression.webhooks import resend, sendgrid


def check_settings(settings: Settings) -> None:
    """Refuse to start with a webhook secret or key that could never verify anything."""
    verdicts = settings.section(MailVerdictSettings)
    try:
        if verdicts.resend_webhook_secret:
            resend.verifier(verdicts.resend_webhook_secret)
        if verdicts.sendgrid_webhook_public_key:
            sendgrid.public_key(verdicts.sendgrid_webhook_public_key)
    except ValueError as error:
        raise SettingsError(str(error)) from None
