"""The hosted pages' routes and static files, added to the application when TENANTD_UI is on
(off: none of these paths exist, so they answer the API's 404)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tenantd.errors import AppError, NotFound
from tenantd.settings import Settings
from tenantd.ui import account_pages as accounts
from tenantd.ui import admin_pages
from tenantd.ui import auth_pages as auth
from tenantd.ui import email_code_pages as email_codes
from tenantd.ui import mfa_pages as mfa
from tenantd.ui import notification_pages as notifications
from tenantd.ui import portal_pages as portal
from tenantd.ui import preference_pages as preferences
from tenantd.ui.config import passkeys_notice, ui_config
from tenantd.ui.forms import problem
from tenantd.ui.render import STATIC, page, redirect, retry_after
from tenantd.ui.session import load_viewer
from tenantd.ui.strings import text
from tenantd.web.middlewares import ERROR_PAGE, REQUEST_ID

log = logging.getLogger(__name__)

MEMBERS = "/accounts/{id}/members"


async def home(request: web.Request) -> web.Response:
    viewer = await load_viewer(request)
    return redirect(request, "/notifications" if viewer else "/login")


async def service_worker(request: web.Request) -> web.FileResponse:
    """The push service worker, served from the root so its scope is the whole site."""
    response = web.FileResponse(STATIC / "sw.js")
    response.headers["Content-Type"] = "text/javascript"
    response.headers["Cache-Control"] = "no-cache"
    return response


_STATIC_ROOT = STATIC.resolve()


def _static_path(name: str) -> Path | None:
    """The regular file `name` names inside the static folder, or None (missing, a folder,
    or anywhere outside it, through `..`, an absolute path or a link)."""
    try:
        path = (_STATIC_ROOT / name).resolve()
        if path.is_relative_to(_STATIC_ROOT) and path.is_file():
            return path
    except (OSError, ValueError):  # a NUL byte, a loop of links
        pass
    return None


async def static_file(request: web.Request) -> web.FileResponse:
    """A file of /static. A miss raises NotFound here, before the answer is prepared, so it is
    the API's 404 envelope: aiohttp's static resource only finds out while preparing the file
    answer, and then sends an empty 404."""
    loop = asyncio.get_running_loop()
    path = await loop.run_in_executor(None, _static_path, request.match_info["name"])
    if path is None:
        raise NotFound()
    return web.FileResponse(path)


PAGES: list[tuple[str, str, Any]] = [
    ("GET", "/", home),
    ("GET", "/signup", auth.signup_page),
    ("POST", "/signup", auth.signup_post),
    ("GET", "/check-inbox", auth.check_inbox_page),
    ("POST", "/check-inbox", auth.check_inbox_post),
    ("GET", "/verify-email", auth.verify_page),
    ("POST", "/verify-email", auth.verify_post),
    ("GET", "/login", auth.login_page),
    ("POST", "/login", auth.login_post),
    ("POST", "/logout", auth.logout_post),
    ("POST", "/logout-all", auth.logout_all_post),
    ("GET", "/reset-password", auth.reset_page),
    ("POST", "/reset-password", auth.reset_post),
    ("POST", "/reset-password/confirm", auth.reset_confirm_post),
    ("GET", "/invitations/accept", auth.invitation_page),
    ("POST", "/invitations/accept", auth.invitation_post),
    ("GET", "/account", accounts.account_page),
    ("POST", "/account/password", accounts.password_post),
    ("POST", "/account/names", accounts.names_post),
    ("GET", "/account/export", accounts.export_get),
    ("POST", "/account/delete", accounts.delete_me_post),
    ("GET", "/accounts", accounts.accounts_page),
    ("POST", "/accounts", accounts.create_post),
    ("POST", "/accounts/switch", accounts.switch_post),
    ("GET", MEMBERS, accounts.members_page),
    ("POST", "/accounts/{id}/rename", accounts.rename),
    ("POST", MEMBERS + "/invite", accounts.invite),
    ("POST", MEMBERS + "/{userId}/role", accounts.change_role),
    ("POST", MEMBERS + "/{userId}/remove", accounts.remove),
    ("POST", "/accounts/{id}/invitations/{iid}/resend", accounts.resend),
    ("POST", "/accounts/{id}/invitations/{iid}/revoke", accounts.revoke),
    ("POST", "/accounts/{id}/transfer", accounts.transfer),
    ("POST", "/accounts/{id}/leave", accounts.leave),
    ("POST", "/accounts/{id}/delete", accounts.delete),
    ("GET", "/join-requests", accounts.join_requests_page),
    ("POST", "/join-requests/{rid}/{decision:approve|deny}", accounts.join_decision_post),
    ("GET", "/notifications", notifications.inbox_page),
    ("POST", "/notifications/read-all", notifications.read_all_post),
    ("POST", "/notifications/{id}/read", notifications.read_post),
    ("GET", "/notifications/preferences", preferences.preferences_page),
    ("POST", "/notifications/preferences", preferences.preferences_post),
    ("GET", "/unsubscribe", notifications.unsubscribe_page),
    ("POST", "/unsubscribe", notifications.unsubscribe_post),
    ("GET", "/tenantd-sw.js", service_worker),
    # two-factor authentication, step-up, email change (issues 17 and 18)
    ("GET", "/login/mfa", mfa.login_mfa_page),
    ("POST", "/login/mfa", mfa.login_mfa_post),
    ("POST", "/account/mfa/totp/setup", mfa.totp_setup_post),
    ("POST", "/account/mfa/totp/confirm", mfa.totp_confirm_post),
    ("POST", "/account/mfa/totp/disable", mfa.totp_disable_post),
    ("POST", "/account/mfa/recovery-codes", mfa.recovery_post),
    ("POST", "/account/passkeys/{pid}/rename", mfa.passkey_rename_post),
    ("POST", "/account/passkeys/{pid}/delete", mfa.passkey_delete_post),
    ("POST", "/reauth", mfa.reauth_post),
    ("POST", "/account/email", mfa.email_post),
    ("GET", "/confirm-email", mfa.confirm_email_page),
    ("POST", "/confirm-email", mfa.confirm_email_post),
    ("GET", "/cancel-email-change", mfa.cancel_email_page),
    ("POST", "/cancel-email-change", mfa.cancel_email_post),
    ("GET", "/wasnt-me", mfa.wasnt_me_page),
    ("POST", "/wasnt-me", mfa.wasnt_me_post),
    ("POST", MEMBERS.removesuffix("/members") + "/require-mfa", mfa.require_mfa_post),
    ("POST", "/accounts/{id}/restore", accounts.restore_post),
    # sign-in by email (issue 29)
    ("GET", "/login/email-code", email_codes.email_code_page),
    ("POST", "/login/email-code", email_codes.email_code_post),
    ("POST", "/login/email-code/verify", email_codes.email_code_verify_post),
    ("GET", "/email-code", email_codes.email_link_page),
    ("POST", "/email-code", email_codes.email_link_post),
    # notification frequency, quiet hours, language, account defaults (issue 18)
    ("POST", preferences.QUIET_HOURS, preferences.quiet_hours_post),
    ("GET", preferences.DEFAULTS, preferences.defaults_page),
    ("POST", preferences.DEFAULTS, preferences.defaults_post),
    # an operator's impersonation link (issue 28)
    ("GET", admin_pages.IMPERSONATE, admin_pages.impersonate_page),
    # the admin portal for the customer's IT (issue 30)
    ("GET", portal.PORTAL, portal.portal_page),
    ("POST", portal.PORTAL, portal.portal_open_post),
    ("GET", portal.SSO, portal.sso_page),
    ("POST", portal.SSO, portal.sso_create_post),
    ("POST", portal.SSO_CONNECTION, portal.sso_update_post),
    ("GET", portal.DIRECTORY, portal.directory_page),
    ("POST", portal.DIRECTORY, portal.directory_create_post),
]


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_page_of(request: web.Request, exc: AppError) -> web.Response:
    """An error as a page of the hosted pages' layout (not found, not allowed, our fault)."""
    issue = problem(exc)
    if exc.status == 404:
        heading, message = text("error.not_found_title"), text("error.not_found")
    elif exc.status == 403:
        heading, message = text("error.forbidden_title"), issue.message
    else:
        heading, message = text("error.title"), issue.message
    response = page(
        request,
        "error.html",
        status=exc.status,
        title=heading,
        heading=heading,
        message=message,
        status_code=exc.status,
        request_id=request.get(REQUEST_ID, "") if exc.status >= 500 else "",
    )
    retry_after(response, issue.retry_after)
    return response


def in_words(handler: Handler) -> Handler:
    """A page's own errors (not found, refused form) as a page, never the API's JSON."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except AppError as exc:
            return error_page_of(request, exc)

    wrapped.__name__ = getattr(handler, "__name__", "page")
    return wrapped


async def error_page(request: web.Request, exc: AppError) -> web.StreamResponse:
    """The error answer of a person's request that reached no page (an unknown path, a wrong
    method) or broke one (500), in the pages' branded layout."""
    return error_page_of(request, exc)


def install_pages(app: web.Application, settings: Settings) -> None:
    """Add the pages and /static when TENANTD_UI is on."""
    if not ui_config(settings).enabled:
        return
    notice = passkeys_notice(settings)
    if notice is not None:
        log.warning(notice)
    for method, path, handler in PAGES:
        app.router.add_route(method, path, in_words(handler))
    app[ERROR_PAGE] = error_page
    app.router.add_get("/static/{name:.+}", static_file)  # GET and HEAD
