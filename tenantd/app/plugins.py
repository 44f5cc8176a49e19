"""The one table of what each domain contributes: routes, job kinds, sweeps and start-up
hooks, in the order they are registered. Adding one touches its domain and a line here."""

from __future__ import annotations

from tenantd.accounts import mail as account_mail
from tenantd.accounts import sweeps as account_sweeps
from tenantd.accounts import views as account_views
from tenantd.auth import deletion as user_deletion
from tenantd.auth import jobs as auth_jobs
from tenantd.auth import user_views
from tenantd.auth import views as auth_views
from tenantd.auth.oauth import views as oauth_views
from tenantd.email.webhooks import views as email_webhook_views
from tenantd.jobs import sweeps as job_sweeps
from tenantd.jobs.kinds import JobKind
from tenantd.notifications import jobs as notification_jobs
from tenantd.notifications import sweeps as notification_sweeps
from tenantd.notifications import views as notification_views
from tenantd.ops.session_sweep import sessions_sweep
from tenantd.ops.sweeps import Sweep
from tenantd.web import health, openapi, probes
from tenantd.web.spec import Routes

ROUTES: tuple[Routes, ...] = (
    health.routes,
    probes.routes,
    openapi.routes,
    auth_views.routes,
    account_views.routes,
    oauth_views.routes,
    email_webhook_views.routes,
    notification_views.routes,
    user_views.routes,
)

JOB_KINDS: tuple[JobKind, ...] = (*auth_jobs.KINDS, *account_mail.KINDS, *notification_jobs.KINDS)

SWEEPS: tuple[Sweep, ...] = (
    *account_sweeps.SWEEPS,
    *notification_sweeps.SWEEPS,
    sessions_sweep,
    job_sweeps.jobs_sweep,
    *user_deletion.SWEEPS,
)


def registered_sweeps() -> dict[str, Sweep]:
    """Every sweep by name, in run order (the scheduler's and `tenantd sweep`'s table)."""
    return {sweep.name: sweep for sweep in SWEEPS}
