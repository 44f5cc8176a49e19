"""The mail sections: the provider that sends, the provider verdict webhooks, the brand."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from tenantd.settings import (
    DERIVED,
    SWITCH,
    Flag,
    Names,
    Positive,
    Section,
    Text,
    UrlBase,
    env,
    one_of,
)

PROVIDERS = ("file", "postmark", "resend", "sendgrid", "smtp")
DEFAULT_BRAND_NAME = "tenantd"
DEFAULT_ACCENT = "#4f46e5"
ACCENT_COLOR = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_provider = one_of(*PROVIDERS, refusal="must be file, postmark, resend, sendgrid or smtp: {value}")


def _accent(value: Any) -> str:
    accent = str(value).strip()
    if not ACCENT_COLOR.match(accent):
        raise ValueError(f"must be a #rgb or #rrggbb colour: {accent!r}")
    return accent


class MailSettings(Section):
    """The provider that sends every mail."""

    title: ClassVar[str] = "Email"

    email_provider: Annotated[str, BeforeValidator(_provider)] = env(
        "EMAIL_PROVIDER",
        "file (one .eml per message), postmark, resend, sendgrid or smtp (see SMTP_URL).",
        default="file",
        json_schema_extra=SWITCH,
    )
    email_from: str = env(
        "EMAIL_FROM",
        "The sender of every mail; with a provider, a verified sender or domain there.",
        default="tenantd <no-reply@localhost>",
    )
    email_file_dir: Path = env(
        "EMAIL_FILE_DIR",
        "file provider output folder; default $TENANTD_DATA_DIR/mail",
        default=Path("var/mail"),
        examples=["./var/mail"],
        json_schema_extra=DERIVED,
    )
    postmark_server_token: Text | None = env(
        "POSTMARK_SERVER_TOKEN",
        "Postmark Server API token (EMAIL_PROVIDER=postmark).",
        default=None,
        repr=False,
    )
    resend_api_key: Text | None = env(
        "RESEND_API_KEY", "Resend API key re_... (EMAIL_PROVIDER=resend).", default=None, repr=False
    )
    sendgrid_api_key: Text | None = env(
        "SENDGRID_API_KEY",
        "SendGrid API key SG.... with Mail Send permission (EMAIL_PROVIDER=sendgrid).",
        default=None,
        repr=False,
    )
    postmark_api_url: UrlBase = env(
        "POSTMARK_API_URL",
        "API bases of the providers (tests, proxies).",
        default="https://api.postmarkapp.com",
    )
    resend_api_url: UrlBase = env("RESEND_API_URL", default="https://api.resend.com")
    sendgrid_api_url: UrlBase = env("SENDGRID_API_URL", default="https://api.sendgrid.com")
    smtp_url: Text | None = env(
        "SMTP_URL",
        "SMTP provider (EMAIL_PROVIDER=smtp): Postfix, Amazon SES SMTP, Mailgun, ..."
        " smtp://user:pass@host:587 speaks STARTTLS before AUTH (refused when the server does"
        " not offer it); smtps://...:465 is TLS from the first byte. Percent-encode @ : / in"
        " the user name or password.",
        default=None,
        repr=False,
        examples=["smtp://user:password@smtp.example.com:587"],
    )
    smtp_starttls: Flag = env(
        "SMTP_STARTTLS",
        "false: plain text, for a local relay only (smtp://127.0.0.1:25).",
        default=True,
    )
    smtp_ca_file: Text | None = env(
        "SMTP_CA_FILE",
        "Extra trusted certificates (PEM) for the SMTP server, e.g. a private CA. Unset:"
        " system store.",
        default=None,
    )

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> dict[str, Any]:
        values = super().from_environment(environment)
        data_dir = Path(environment.get("TENANTD_DATA_DIR", "").strip() or "var")
        values["EMAIL_FILE_DIR"] = Path(
            values.get("EMAIL_FILE_DIR") or data_dir / "mail"
        ).absolute()
        return values


class MailVerdictSettings(Section):
    """The providers' bounce and complaint webhooks (the suppression list's verdicts)."""

    title: ClassVar[str] = "Provider verdict webhooks"

    resend_webhook_secret: Text | None = env(
        "RESEND_WEBHOOK_SECRET",
        "Provider webhook verification; unset: that webhook answers 404. Resend: the"
        " endpoint's signing secret whsec_...; SendGrid: the Signed Event Webhook verification"
        " key (PEM, or SendGrid's bare base64 DER).",
        default=None,
        repr=False,
        examples=["whsec_..."],
    )
    sendgrid_webhook_public_key: Text | None = env("SENDGRID_WEBHOOK_PUBLIC_KEY", default=None)
    postmark_webhook_username: Text | None = env(
        "POSTMARK_WEBHOOK_USERNAME",
        "Postmark bounce / spam-complaint webhook: POST /api/v1/webhooks/postmark. In"
        " Postmark, set the webhook URL with these credentials in it"
        " (https://USER:PASSWORD@your.host/api/v1/webhooks/postmark); Postmark sends them as"
        " HTTP Basic auth. Both unset: the route answers 404.",
        default=None,
    )
    postmark_webhook_password: Text | None = env(
        "POSTMARK_WEBHOOK_PASSWORD", default=None, repr=False
    )
    ses_sns_topic_arns: Names = env(
        "SES_SNS_TOPIC_ARNS",
        "Amazon SES bounce / complaint notifications through SNS: POST /api/v1/webhooks/ses."
        " Comma list of the SNS topic ARNs to accept (subscribe the HTTPS endpoint to them; the"
        " subscription confirms itself). Unset: the route answers 404.",
        default=(),
        examples=["arn:aws:sns:us-east-1:123456789012:ses-feedback"],
    )
    webhook_max_bodies: Positive = env(
        "TENANTD_WEBHOOK_MAX_BODIES",
        "Webhook bodies (up to 10 MiB each) read or held at once per process; a delivery"
        " waits up to 10 s for a slot, then gets 503 with Retry-After (providers retry)."
        " Signature headers are checked before any body is read.",
        default=8,
    )
    webhook_max_bodies_per_client: Positive | None = env(
        "TENANTD_WEBHOOK_MAX_BODIES_PER_CLIENT",
        "Of those, at most this many at once from one client address (an IPv6 client counts"
        " per /64; default a quarter of the slots). Authenticated-by-header providers"
        " (Postmark) have their own.",
        default=None,
        examples=[2],
    )
    webhook_min_body_rate: Positive = env(
        "TENANTD_WEBHOOK_MIN_BODY_RATE",
        "After a 2 s grace a body must average this many bytes a second, or it is cut with 408.",
        default=4096,
    )


class BrandSettings(Section):
    """What the hosted pages and every HTML mail show."""

    title: ClassVar[str] = "Brand"

    brand_name: Text = env(
        "TENANTD_UI_BRAND_NAME",
        "The name, logo and accent colour of the hosted pages and of every HTML mail.",
        default=DEFAULT_BRAND_NAME,
    )
    logo_url: Text | None = env(
        "TENANTD_UI_LOGO_URL", default=None, examples=["https://cdn.example.com/logo.svg"]
    )
    accent_color: Annotated[str, BeforeValidator(_accent)] = env(
        "TENANTD_UI_ACCENT_COLOR", default=DEFAULT_ACCENT
    )
