"""The whole configuration: the kernel's `Settings` with every package's section composed
in, and the one loader of it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from tenantd.accounts.settings import AccountSettings
from tenantd.email.settings import BrandSettings, MailSettings, MailVerdictSettings
from tenantd.identity.settings import IdentitySettings, SignInSettings
from tenantd.jobs.settings import JobSettings
from tenantd.notifications.settings import NotificationSettings
from tenantd.ops.config import ProcessSettings, RateLimitSettings, SchedulerSettings
from tenantd.outbox.settings import OutboxSettings
from tenantd.settings import Settings, load
from tenantd.ui.settings import PageSettings
from tenantd.webhooks.settings import WebhookSettings


class AppSettings(Settings):
    """Every variable tenantd reads, by section (the manual's configuration page is built
    from these fields, in this order)."""

    mail: MailSettings = Field(default_factory=MailSettings)
    mail_verdicts: MailVerdictSettings = Field(default_factory=MailVerdictSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    outbox: OutboxSettings = Field(default_factory=OutboxSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    sign_in: SignInSettings = Field(default_factory=SignInSettings)
    accounts: AccountSettings = Field(default_factory=AccountSettings)
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    pages: PageSettings = Field(default_factory=PageSettings)
    brand: BrandSettings = Field(default_factory=BrandSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    process: ProcessSettings = Field(default_factory=ProcessSettings)


def load_settings(
    env_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> AppSettings:
    """Build the settings from the process environment (or `environ`); an env file fills in
    what is unset. A bad value raises SettingsError naming its variable."""
    return load(AppSettings, env_file, environ)
