"""The notification job kinds: dispatch, and one delivery job each for email and web push."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.errors import AppError, NotFound, ValidationFailed
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.notifications.channels import email
from tenantd.notifications.channels.web_push.delivery import run_web_push_job
from tenantd.notifications.dispatch_batch import dispatch_many
from tenantd.notifications.registry import wants_locale
from tenantd.notifications.service import (
    DISPATCH_ATTEMPTS,
    EMAIL_ATTEMPTS,
    FOLLOW_UP_KINDS,
    PUSH_ATTEMPTS,
    Dispatch,
    dispatch_one,
    flush_digest,
    live_channels,
)

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications


async def run_dispatch(services: Notifications, payload: dict[str, Any], job: JobInfo) -> None:
    """The queued half of send(): the same worker function the inline mode calls."""
    send = Dispatch.from_job(payload, job.id)
    try:
        await dispatch_one(services, send)
    except (NotFound, ValidationFailed) as error:
        # The recipient or event type is gone, or the payload no longer validates.
        raise PermanentJobError(error.message) from error


async def run_dispatch_batch(
    services: Notifications, items: list[tuple[JobInfo, dict[str, Any]]]
) -> list[BaseException | None]:
    """Several dispatches in one transaction (one commit instead of one each), their
    notifications written by one statement (dispatch_batch.dispatch_many).

    A job refused for its input does not disturb the others; any other error rolls the
    transaction back and every job runs again on its own (dispatch is idempotent).
    """
    # Only notification writes between them: the one statement needs no BEGIN and COMMIT.
    alone = all(_one_statement(services, payload) for _, payload in items)
    try:
        sends = [Dispatch.from_job(payload, info.id) for info, payload in items]
        async with services.db.connection() if alone else services.db.transaction() as conn:
            outcomes = await dispatch_many(services, conn, sends, one_statement=alone)
    except Exception:
        results: list[BaseException | None] = []
        for info, payload in items:
            try:
                await run_dispatch(services, payload, info)
                results.append(None)
            except Exception as error:
                results.append(error)
        return results
    return [
        PermanentJobError(outcome.message) if isinstance(outcome, AppError) else None
        for outcome in outcomes
    ]


def _one_statement(services: Notifications, payload: dict[str, Any]) -> bool:
    """Whether this dispatch makes no statement but its notification write: no digest, no
    throttle count, no locale to read, no email or push job to queue."""
    event_type = str(payload.get("eventType"))
    if event_type not in services.registry:
        return False
    definition = services.registry.get(event_type).definition
    if definition.digest is not None or definition.throttle is not None:
        return False
    if definition.in_app is None or wants_locale(definition.in_app):
        return False
    channels = live_channels(services.settings, definition.default_channels)
    return not any(channel in FOLLOW_UP_KINDS for channel in channels)


async def run_digest_job(services: Notifications, payload: dict[str, Any], job: JobInfo) -> None:
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
        # One notification statement for 32 dispatches, which raises one cache notice for
        # them all (sql/0191). Two batches are in flight under the default 64 job slots (one
        # is prepared while the other writes); 64 a batch measured no cheaper a notification.
        batch_size=32,
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
