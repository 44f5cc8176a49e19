"""MFA mail (a recovery code was used, an account now requires MFA, an operator reset the
factors): one durable job kind, submitted in the transaction of the change, so it leaves
after commit, and the send path consults the suppression list first."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tenantd.db import Conn
from tenantd.email.message import EmailMessage, job_mail_key
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.jobs.payload import malformed_payload_is_permanent
from tenantd.mfa import queries

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.mfa.domain import Mfa

MFA_EMAIL = "mfa.email"
RECOVERY_CODE_USED = "recovery_code_used"
ACCOUNT_REQUIRES_MFA = "account_requires_mfa"
MFA_RESET = "mfa_reset"


async def submit(
    services: Services,
    conn: Conn,
    purpose: str,
    *,
    user_id: uuid.UUID,
    account_name: str | None = None,
    remaining: int | None = None,
) -> None:
    """Queue one mail with the caller's change (ids and counts only; the address is read
    when the job runs)."""
    payload: dict[str, Any] = {"purpose": purpose, "userId": str(user_id)}
    if account_name is not None:
        payload["accountName"] = account_name
    if remaining is not None:
        payload["remaining"] = remaining
    await services.jobs.enqueue(conn, MFA_EMAIL, payload)


def message(purpose: str, to: str, payload: dict[str, Any], base_url: str) -> EmailMessage:
    security = f"{base_url.rstrip('/')}/account"
    if purpose == RECOVERY_CODE_USED:
        remaining = int(payload.get("remaining", 0))
        subject = "A recovery code was used to sign in"
        text = (
            "One of your recovery codes was just used to sign in to your account.\n"
            f"Recovery codes left: {remaining}.\n\n"
            "If this was not you, change your password and regenerate your recovery codes"
            f" at {security} now.\n"
        )
    elif purpose == ACCOUNT_REQUIRES_MFA:
        name = str(payload.get("accountName", "An account"))
        subject = f"{name} now requires multi-factor authentication"
        text = (
            f"The owner of {name} now requires multi-factor authentication for its members.\n"
            f"Set up an authenticator app or a passkey at {security} to keep using it.\n"
        )
    elif purpose == MFA_RESET:
        subject = "Your multi-factor authentication was reset"
        text = (
            "An operator removed the authenticator app, passkeys and recovery codes of your"
            f" account. Set up a new factor at {security}.\n"
            "If you did not ask for this, contact support.\n"
        )
    else:
        raise PermanentJobError(f"unknown mfa mail purpose: {purpose!r}")
    return EmailMessage(to=to, subject=subject, text=text, tag=f"mfa_{purpose}")


async def run_mfa_email(services: Mfa, payload: dict[str, Any], job: JobInfo) -> None:
    with malformed_payload_is_permanent("mfa mail"):
        purpose = str(payload["purpose"])
        user_id = uuid.UUID(str(payload["userId"]))
    async with services.db.connection() as conn:
        to = await queries.user_email(conn, user_id)
    if to is None:
        return  # the user is gone
    mail = message(purpose, to, payload, services.settings.public_base_url)
    with job_mail_key(job.id, MFA_EMAIL):  # a run again does not mail twice
        await services.email.send_from_job(mail)  # suppression is checked first


JOB_KINDS = (JobKind(name=MFA_EMAIL, run=run_mfa_email, max_attempts=5, timeout=60.0),)
