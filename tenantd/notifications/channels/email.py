"""Email channel: the email job renders the event's Jinja2 template and sends it through the
email service (which checks the suppression list first), then settles the delivery row.

sent -> `sent`; suppressed address -> `suppressed` with the reason; a provider error is
retried with backoff and settles `failed` when the job gives up (a non-retryable provider
error, or a broken template, settles `failed` at once). Delivery is at least once: a crash
between the provider's answer and the settle sends again on the retry.
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import jinja2

from tenantd.db import Row
from tenantd.email.message import EmailMessage, EmailSendError
from tenantd.email.templates import Brand, absolute_links, absolute_url, brand_of, html_to_text
from tenantd.errors import AppError
from tenantd.jobs.kinds import PermanentJobError
from tenantd.notifications import queries
from tenantd.notifications.channels import delivery_job, settle_delivery
from tenantd.notifications.registry import (
    EmailContent,
    RegisteredEvent,
    render,
    template_environment,
)
from tenantd.notifications.service import validate_payload
from tenantd.notifications.unsubscribe import make_token, page_url, unsubscribe_url

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications

log = logging.getLogger(__name__)

CHANNEL = "email"

LOCALE = re.compile(r"[a-z]{2}(-[A-Z]{2})?")  # a users.locale value, safe in a file name


class TemplateProblem(Exception):
    pass


def localized(env: jinja2.Environment, path: str, locale: str | None) -> jinja2.Template:
    """`name.<locale>.ext` beside `name.ext` when the event ships it, else `name.ext`."""
    if locale and LOCALE.fullmatch(locale):
        pure = PurePosixPath(path)
        try:
            return env.get_template(str(pure.with_name(f"{pure.stem}.{locale}{pure.suffix}")))
        except jinja2.TemplateNotFound:
            pass
    return env.get_template(path)


def render_email(
    event: RegisteredEvent,
    content: EmailContent,
    variables: dict[str, Any],
    *,
    brand: Brand,
    base_url: str,
    locale: str | None = None,
) -> tuple[str, str | None]:
    """(text, html) of the event's template (its `<locale>` variant first); `.html` templates
    also get a text part, and their relative links are resolved against PUBLIC_BASE_URL."""
    env = event.environment or template_environment(event.base_dir, brand)
    path = content.template_path
    context = {**content.variables, **variables, "base_url": base_url, "locale": locale}
    try:
        rendered = localized(env, path, locale).render(**context)
        if PurePosixPath(path).suffix.lower() not in {".html", ".htm"}:
            return rendered, None
        rendered = absolute_links(rendered, base_url)
        sibling = str(PurePosixPath(path).with_suffix(".txt"))
        try:
            text = localized(env, sibling, locale).render(**context)
        except jinja2.TemplateNotFound:
            text = html_to_text(rendered)
        return text, rendered
    except jinja2.TemplateNotFound:
        raise TemplateProblem(f"email template {path} not found for {event.type}") from None
    except jinja2.TemplateError as error:
        raise TemplateProblem(f"email template {path} of {event.type}: {error}") from None


def delivery_key(notification_id: uuid.UUID) -> str:
    """The idempotency key of this notification's email delivery: every run sends the same."""
    return f"notification/{notification_id}/{CHANNEL}"


def build_message(services: Notifications, row: Row) -> EmailMessage:
    """Render the notification email with its RFC 8058 one-click unsubscribe headers."""
    event = services.registry.get(row["event_type"])
    definition = event.definition
    if definition.email is None:
        raise TemplateProblem(f"event {event.type} has no email render function")
    payload = dict(row["payload"])
    digest = payload.pop("_digest", None)  # a digest: the latest item plus the batch
    model = validate_payload(definition, payload)
    recipient = str(row["user_id"])
    locale = row.get("locale")
    content = render(definition.email, recipient, model, locale)
    settings = services.settings
    token = make_token(settings.secret_key, user_id=row["user_id"], event_type=event.type)
    one_click = unsubscribe_url(settings.public_base_url, token)  # RFC 8058: the API route
    link = page_url(settings, token)
    text, markup = render_email(
        event,
        content,
        {
            "unsubscribe_url": link,
            "digest": digest,
            "notification": {
                "id": str(row["id"]),
                "title": row["title"],
                "body": row["body"],
                "cta_url": absolute_url(row["cta_url"], settings.public_base_url)
                if row["cta_url"]
                else row["cta_url"],
                "cta_label": row["cta_label"],
            },
        },
        brand=brand_of(settings),
        base_url=settings.public_base_url,
        locale=locale,
    )
    return EmailMessage(
        to=row["email"],
        subject=content.subject,
        text=text,
        html=markup,
        headers={
            "List-Unsubscribe": f"<{one_click}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
        tag=f"notification:{event.type}",
        idempotency_key=delivery_key(row["id"]),
    )


@delivery_job(CHANNEL)
async def run_email_job(services: Notifications, notification_id: uuid.UUID, row: Row) -> None:
    """Deliver one notification email (a settled row is left alone: idempotent)."""
    try:
        message = build_message(services, row)
    except (TemplateProblem, AppError) as problem:
        await settle_delivery(services, notification_id, CHANNEL, "failed", str(problem)[:500])
        raise PermanentJobError(str(problem)) from problem
    try:
        result = await services.email.send(message)
    except EmailSendError as error:
        if not error.retryable:
            await settle_delivery(
                services, notification_id, CHANNEL, "failed", f"provider_error: {error}"[:500]
            )
            raise PermanentJobError(str(error)) from error
        async with services.db.connection() as conn:
            await queries.count_attempt(conn, notification_id=notification_id, channel=CHANNEL)
        raise
    if result.status == "suppressed":
        await settle_delivery(
            services, notification_id, CHANNEL, "suppressed", result.reason or "suppressed"
        )
    else:
        await settle_delivery(services, notification_id, CHANNEL, "sent")


async def give_up_email(services: Notifications, payload: dict[str, Any], error: str) -> None:
    """Retries exhausted: the delivery settles failed with the last error."""
    notification_id = uuid.UUID(str(payload["notificationId"]))
    await settle_delivery(
        services, notification_id, CHANNEL, "failed", f"provider_error: {error}"[:500]
    )
