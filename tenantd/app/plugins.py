"""The one table of what each domain contributes to every process: job kinds, sweeps and metric
gauges, in the order they are registered (the web app's route table is `app/routes.py`, so a CLI
command loads no view). Adding one touches its domain and a line here."""

from __future__ import annotations

from tenantd.accounts import mail as account_mail
from tenantd.accounts import sweeps as account_sweeps
from tenantd.auth import deletion as user_deletion
from tenantd.auth import jobs as auth_jobs
from tenantd.auth import sweeps as auth_sweeps
from tenantd.email import sweeps as email_sweeps
from tenantd.identity import sweeps as identity_sweeps
from tenantd.identity.keys import sweeps as key_sweeps
from tenantd.jobs import sweeps as job_sweeps
from tenantd.jobs.kinds import JobKind
from tenantd.mfa import mail as mfa_mail
from tenantd.mfa import sensitive
from tenantd.mfa import sweeps as mfa_sweeps
from tenantd.notifications import jobs as notification_jobs
from tenantd.notifications import metrics as notification_metrics
from tenantd.notifications import sweeps as notification_sweeps
from tenantd.ops import ratelimit
from tenantd.ops.metrics import CountedGauge
from tenantd.ops.sweeps import Sweep, combined
from tenantd.outbox import sweeps as outbox_sweeps
from tenantd.portal import sweeps as portal_sweeps
from tenantd.sso import sweeps as sso_sweeps
from tenantd.suppression import metrics as suppression_metrics
from tenantd.suppression import sweeps as suppression_sweeps
from tenantd.web import sweeps as web_sweeps
from tenantd.webhooks import jobs as webhook_jobs

JOB_KINDS: tuple[JobKind, ...] = (
    *auth_jobs.JOB_KINDS,
    *account_mail.JOB_KINDS,
    *notification_jobs.JOB_KINDS,
    *mfa_mail.JOB_KINDS,
    *sensitive.JOB_KINDS,
    *webhook_jobs.JOB_KINDS,
)

# Rows of several domains that only matter until they expire: one sweep, one lock.
SESSIONS_SWEEP = combined(
    "sessions",
    "Expired sessions, revoked tokens, user tokens, rate limits, webhook ids",
    identity_sweeps.expired_session_rows,
    auth_sweeps.expired_email_codes,
    ratelimit.expired_counters,
    suppression_sweeps.old_event_ids,
)

SWEEPS: tuple[Sweep, ...] = (
    *account_sweeps.SWEEPS,
    *notification_sweeps.SWEEPS,
    SESSIONS_SWEEP,
    *job_sweeps.SWEEPS,
    *web_sweeps.SWEEPS,
    *key_sweeps.SWEEPS,
    *mfa_sweeps.SWEEPS,
    *outbox_sweeps.SWEEPS,
    *user_deletion.SWEEPS,
    *email_sweeps.SWEEPS,
    *sso_sweeps.SWEEPS,
    *portal_sweeps.SWEEPS,
)


# Gauges over counts the domains' triggers keep (read by the metrics task).
METRIC_GAUGES: tuple[CountedGauge, ...] = (
    *notification_metrics.GAUGES,
    *suppression_metrics.GAUGES,
)


def registered_sweeps() -> dict[str, Sweep]:
    """Every sweep by name, in run order (the scheduler's and `tenantd sweep`'s table)."""
    return {sweep.name: sweep for sweep in SWEEPS}
