"""The notification job kinds: dispatch, and one delivery job each for email and web push."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.db import Conn
from tenantd.errors import NotFound, ValidationFailed
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.notifications.channels import email
from tenantd.notifications.channels.web_push.delivery import run_web_push_job
from tenantd.notifications.service import (
    DISPATCH_ATTEMPTS,
    EMAIL_ATTEMPTS,
    PUSH_ATTEMPTS,
    dispatch,
    flush_digest,
)

if TYPE_CHECKING:
    from tenantd.notifications.services import NotificationServices


async def run_dispatch(
    services: NotificationServices,
    payload: dict[str, Any],
    job: JobInfo,
    *,
    conn: Conn | None = None,
) -> None:
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
            conn=conn,
            # The job's id is the send's sequence: a digest lists its items in send order.
            send_sequence=job.id,
        )
    except (NotFound, ValidationFailed) as error:
        # The recipient or event type is gone, or the payload no longer validates.
        raise PermanentJobError(error.message) from error


async def run_dispatch_batch(
    services: NotificationServices, items: list[tuple[JobInfo, dict[str, Any]]]
) -> list[BaseException | None]:
    """Several dispatches in one transaction (one commit instead of one each).

    A job refused for its input does not disturb the others; a statement error rolls the
    transaction back and every job runs again on its own (dispatch is idempotent).
    """
    results: list[BaseException | None] = [None] * len(items)
    try:
        async with services.db.transaction() as conn:
            for index, (info, payload) in enumerate(items):
                try:
                    await run_dispatch(services, payload, info, conn=conn)
                except PermanentJobError as refused:
                    results[index] = refused
    except Exception:
        for index, (info, payload) in enumerate(items):
            try:
                await run_dispatch(services, payload, info)
                results[index] = None
            except Exception as error:
                results[index] = error
    return results


async def run_digest_job(
    services: NotificationServices, payload: dict[str, Any], job: JobInfo
) -> None:
    """A digest's window closed: one notification per channel (idempotent)."""
    try:
        await flush_digest(services, digest_id=uuid.UUID(str(payload["digestId"])))
    except (NotFound, ValidationFailed) as error:
        raise PermanentJobError(error.message) from error


JOB_KINDS = (
    JobKind(
        name="notifications.dispatch",
        run=run_dispatch,
        run_batch=run_dispatch_batch,
        max_attempts=DISPATCH_ATTEMPTS,
    ),
    JobKind(
        name="notifications.email",
        run=email.run_email_job,
        on_give_up=email.give_up_email,
        max_attempts=EMAIL_ATTEMPTS,
        timeout=60.0,
    ),
    JobKind(name="notifications.digest", run=run_digest_job, max_attempts=DISPATCH_ATTEMPTS),
    JobKind(
        name="notifications.web_push",
        run=run_web_push_job,
        max_attempts=PUSH_ATTEMPTS,
        timeout=60.0,
    ),
)
