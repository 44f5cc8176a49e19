"""The web app's route table: each domain's `ROUTES`, in the order they are registered. Only
the application factory reads it, so a CLI command never imports a view (nor pysaml2 or the
SCIM models behind the SSO and directory views)."""

from __future__ import annotations

from tenantd.accounts import views as account_views
from tenantd.auth import user_views
from tenantd.auth import views as auth_views
from tenantd.auth.admin import views as admin_views
from tenantd.auth.keys import views as key_views
from tenantd.auth.oauth import views as oauth_views
from tenantd.directories import scim_views
from tenantd.directories import views as directory_views
from tenantd.mfa import views as mfa_views
from tenantd.notifications import server_views as notification_server_views
from tenantd.notifications import views as notification_views
from tenantd.portal import views as portal_views
from tenantd.sso import views as sso_views
from tenantd.suppression.webhooks import views as suppression_webhook_views
from tenantd.ui import routes as pages
from tenantd.web import health, openapi, probes
from tenantd.web.spec import Routes
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
