"""The notification job kinds: dispatch, and one delivery job each for email and web push."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.errors import NotFound, ValidationFailed
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.notifications.channels import email, web_push
from tenantd.notifications.service import (
    DISPATCH_ATTEMPTS,
    EMAIL_ATTEMPTS,
    PUSH_ATTEMPTS,
    dispatch,
)

if TYPE_CHECKING:
    from tenantd.services import Services


async def run_dispatch(services: Services, payload: dict[str, Any], job: JobInfo) -> None:
    """The queued half of send(): the same worker function the inline mode calls."""
    account = payload.get("accountId")
    try:
        await dispatch(
            services,
            notification_id=uuid.UUID(payload["notificationId"]),
            event_type=payload["eventType"],
            recipient_user_id=uuid.UUID(payload["recipientUserId"]),
            payload=payload["payload"],
            account_id=uuid.UUID(account) if account else None,
        )
    except (NotFound, ValidationFailed) as error:
        # The recipient or event type is gone, or the payload no longer validates.
        raise PermanentJobError(error.message) from error


KINDS = (
    JobKind(name="notifications.dispatch", run=run_dispatch, max_attempts=DISPATCH_ATTEMPTS),
    JobKind(
        name="notifications.email",
        run=email.run_email_job,
        on_give_up=email.give_up_email,
        max_attempts=EMAIL_ATTEMPTS,
        timeout=60.0,
    ),
    JobKind(
        name="notifications.web_push",
        run=web_push.run_web_push_job,
        max_attempts=PUSH_ATTEMPTS,
        timeout=60.0,
    ),
)
