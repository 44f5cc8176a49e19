"""The transactional emails of the auth flows (they bypass notifications and preferences)."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from tenantd.email import templates
from tenantd.email.message import EmailMessage, EmailSendError, SendResult

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.settings import Settings

log = logging.getLogger(__name__)

Outgoing = EmailMessage
VERIFY_TTL_HOURS = 48


@lru_cache(maxsize=4)  # one brand a configuration
def _own_templates(brand: templates.Brand) -> jinja2.Environment:
    return templates.mail_environment([Path(__file__).parent / "templates"], brand)


def _shipped(
    to: str, name: str, variables: dict[str, Any], settings: Settings, locale: str | None = None
) -> EmailMessage:
    brand = templates.brand_of(settings)
    subject, text, html = templates.render(name, variables, brand=brand, locale=locale)
    return EmailMessage(to=to, subject=subject, text=text, html=html, tag=name)


def _own(
    to: str, name: str, variables: dict[str, Any], settings: Settings, *, html: bool = True
) -> EmailMessage:
    """A mail from this package's templates, `name.subject.txt`, `name.txt` and (with `html`)
    `name.html` in the deployment's brand, tagged `name`."""
    env = _own_templates(templates.brand_of(settings))
    return EmailMessage(
        to=to,
        subject=env.get_template(f"{name}.subject.txt").render(**variables).strip(),
        text=env.get_template(f"{name}.txt").render(**variables),
        html=env.get_template(f"{name}.html").render(**variables) if html else None,
        tag=name,
    )


def verification(
    to: str, *, settings: Settings, link: str, first_name: str = "", locale: str | None = None
) -> EmailMessage:
    return _shipped(
        to,
        "verify_email",
        {"link": link, "first_name": first_name, "ttl_hours": VERIFY_TTL_HOURS},
        settings,
        locale,
    )


def password_reset(
    to: str, *, settings: Settings, link: str, ttl_minutes: int, locale: str | None = None
) -> EmailMessage:
    variables = {"link": link, "ttl_minutes": ttl_minutes}
    return _shipped(to, "password_reset", variables, settings, locale)


def account_exists(to: str, *, settings: Settings) -> EmailMessage:
    return _own(to, "account_exists", {"base_url": settings.public_base_url}, settings)


def session_reused(to: str, *, settings: Settings) -> EmailMessage:
    return _own(to, "session_reused", {"base_url": settings.public_base_url}, settings)


def email_code(
    to: str, *, code: str, link: str, ttl_minutes: int, settings: Settings, first_name: str = ""
) -> EmailMessage:
    """The sign-in code and the magic link, in one mail (issue 29)."""
    variables = {
        "base_url": settings.public_base_url,
        "code": code,
        "link": link,
        "ttl_minutes": ttl_minutes,
        "first_name": first_name,
    }
    return _own(to, "email_code", variables, settings)


def new_signin(
    to: str, *, settings: Settings, device: str, ip: str, time: str, method: str
) -> EmailMessage:
    variables = {
        "base_url": settings.public_base_url,
        "sessions_url": f"{settings.public_base_url.rstrip('/')}/account",
        "device": device,
        "ip": ip,
        "time": time,
        "method": method,
    }
    return _own(to, "new_signin", variables, settings)


async def deliver(services: Services, message: EmailMessage) -> None:
    """Send on the request path; a provider failure is logged, never shown (answers must not
    depend on it)."""
    try:
        result = await services.email.send(message)
    except EmailSendError:
        log.exception("transactional email not sent", extra={"tag": message.tag})
        return
    _log_unsent(message, result)


async def deliver_from_job(services: Services, message: EmailMessage) -> None:
    """Send from the `auth.email` job: a provider failure a retry may fix fails the job, so the
    durable queue retries it; a permanent refusal or a suppressed recipient settles it."""
    _log_unsent(message, await services.email.send_from_job(message))


def _log_unsent(message: EmailMessage, result: SendResult) -> None:
    if result.status != "sent":
        log.info(
            "transactional email %s: %s", result.status, result.reason, extra={"tag": message.tag}
        )


def own_text(to: str, name: str, variables: dict[str, Any], settings: Settings) -> EmailMessage:
    """A plain-text mail from this package's templates (`name.subject.txt`, `name.txt`)."""
    return _own(to, name, variables, settings, html=False)
