"""The auth job kind: verification, password-reset, sign-in code, session-reuse, new sign-in and
email-change mail, off the request path.

The request only queues `{purpose, email}` (no token: links are minted when the job runs and
stored hashed like every other), so the answer takes the same time whether or not the
address belongs to anyone. A database error or a provider failure a retry may fix fails the
job and the durable queue retries it; a permanent refusal or a suppressed recipient settles it
(`mail.deliver_from_job`, the accounts.email rule).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.auth import email_change, email_code, service
from tenantd.email.message import job_mail_key
from tenantd.identity.signin import AUTH_EMAIL, NEW_SIGNIN
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError

if TYPE_CHECKING:
    from tenantd.bundle import Services


async def run_auth_email(services: Services, payload: dict[str, Any], job: JobInfo) -> None:
    """One auth mail; keyed by this job, so a run again after a crash does not mail twice
    (tenantd/email/service.py says what can still repeat)."""
    with job_mail_key(job.id, AUTH_EMAIL):
        await _run_auth_email(services, payload)


async def _run_auth_email(services: Services, payload: dict[str, Any]) -> None:
    if payload.get("purpose") == NEW_SIGNIN:
        session_id = payload.get("sessionId")
        if not isinstance(session_id, str):
            raise PermanentJobError("new sign-in mail job without a session id")
        await service.mail_new_signin(services, session_id)
        return
    if payload.get("purpose") == email_change.EMAIL_CHANGE:
        user_id, email = payload.get("userId"), payload.get("email")
        if not isinstance(user_id, str) or not isinstance(email, str):
            raise PermanentJobError("email change mail job without a user or an address")
        await email_change.mail_change(services, user_id=uuid.UUID(user_id), new_email=email)
        return
    send = SENDERS.get(payload.get("purpose", ""))
    email = payload.get("email")
    if send is None or not isinstance(email, str):
        raise PermanentJobError(f"unknown auth mail job: {sorted(payload)}")
    await send(services, email)


SENDERS = {
    service.VERIFY: service.mail_verification_link,
    service.RESET: service.mail_reset_link,
    service.SESSION_REUSED: service.mail_session_reused,
    email_code.EMAIL_CODE: email_code.mail_code,
}
JOB_KINDS = (JobKind(name=AUTH_EMAIL, run=run_auth_email, max_attempts=3, timeout=60.0),)
