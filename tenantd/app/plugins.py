"""The one table of what each domain contributes: routes, job kinds, sweeps, metric gauges and
start-up hooks, in the order they are registered. Adding one touches its domain and a line here."""

from __future__ import annotations

from tenantd.accounts import mail as account_mail
from tenantd.accounts import sweeps as account_sweeps
from tenantd.accounts import views as account_views
from tenantd.auth import deletion as user_deletion
from tenantd.auth import jobs as auth_jobs
from tenantd.auth import sweeps as auth_sweeps
from tenantd.auth import user_views
from tenantd.auth import views as auth_views
from tenantd.auth.admin import views as admin_views
from tenantd.auth.keys import views as key_views
from tenantd.auth.oauth import views as oauth_views
from tenantd.directories import scim_views
from tenantd.directories import views as directory_views
from tenantd.email import sweeps as email_sweeps
from tenantd.identity import sweeps as identity_sweeps
from tenantd.identity.keys import sweeps as key_sweeps
from tenantd.jobs import sweeps as job_sweeps
from tenantd.jobs.kinds import JobKind
from tenantd.mfa import mail as mfa_mail
from tenantd.mfa import sensitive
from tenantd.mfa import sweeps as mfa_sweeps
from tenantd.mfa import views as mfa_views
from tenantd.notifications import jobs as notification_jobs
from tenantd.notifications import metrics as notification_metrics
from tenantd.notifications import server_views as notification_server_views
from tenantd.notifications import sweeps as notification_sweeps
from tenantd.notifications import views as notification_views
from tenantd.ops import ratelimit
from tenantd.ops.metrics import CountedGauge
from tenantd.ops.sweeps import Sweep, combined
from tenantd.outbox import sweeps as outbox_sweeps
from tenantd.portal import sweeps as portal_sweeps
from tenantd.portal import views as portal_views
from tenantd.sso import sweeps as sso_sweeps
from tenantd.sso import views as sso_views
from tenantd.suppression import metrics as suppression_metrics
from tenantd.suppression import sweeps as suppression_sweeps
from tenantd.suppression.webhooks import views as suppression_webhook_views
from tenantd.ui import routes as pages
from tenantd.web import health, openapi, probes
from tenantd.web import sweeps as web_sweeps
from tenantd.web.spec import Routes
from tenantd.webhooks import jobs as webhook_jobs
from tenantd.webhooks import views as webhook_views

ROUTES: tuple[Routes, ...] = (
    health.ROUTES,
    probes.ROUTES,
    openapi.ROUTES,
    auth_views.ROUTES,
    account_views.ROUTES,
    oauth_views.ROUTES,
    suppression_webhook_views.ROUTES,
    notification_views.ROUTES,
    notification_server_views.ROUTES,
    key_views.ROUTES,
    mfa_views.ROUTES,
    webhook_views.ROUTES,
    user_views.ROUTES,
    admin_views.ROUTES,
    sso_views.ROUTES,
    directory_views.ROUTES,
    portal_views.ROUTES,
    scim_views.ROUTES,
)

# The hosted pages' routes: the same table, registered when TENANTD_UI is on.
PAGE_ROUTES: tuple[Routes, ...] = (pages.ROUTES,)

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
