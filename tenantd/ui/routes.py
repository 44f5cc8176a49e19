"""The hosted pages' part of the route table, their guard and error pages, and the static
files, added to the application when TENANTD_UI is on (off: none of these paths exist, so
they answer the API's 404)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

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
from tenantd.ui.config import passkeys_notice
from tenantd.ui.forms import problem, read_form
from tenantd.ui.render import STATIC, page, redirect, retry_after
from tenantd.ui.session import load_viewer
from tenantd.ui.strings import text
from tenantd.web.middlewares import ERROR_PAGE, REQUEST_ID
from tenantd.web.routing import PageDoor
from tenantd.web.spec import Access, Routes, RouteSpec, View

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


ROUTES = Routes("pages")
PUBLIC = Access.PUBLIC
# Every page: a signed-in one unless PUBLIC (an AUTH page sends anyone else to sign in).
route = ROUTES.page


def form(path: str, view: View, post: View, again: View, *, access: Access = Access.AUTH) -> None:
    """A page and the form it posts to itself: GET shows it, POST handles the form and `again`
    shows the page again with what was refused."""
    route("GET", path, view, access=access)
    route("POST", path, post, access=access, again=again)


def members_form(path: str, view: View) -> None:
    """A form of an account's members page, posted to a path of its own: a refusal shows the
    members page again."""
    route("POST", path, view, again=accounts.members_again)


route("GET", "/", home, access=PUBLIC)
form("/signup", auth.signup_page, auth.signup_post, auth.signup_again, access=PUBLIC)
form(
    "/check-inbox",
    auth.check_inbox_page,
    auth.check_inbox_post,
    auth.check_inbox_again,
    access=PUBLIC,
)
form("/verify-email", auth.verify_page, auth.verify_post, auth.verify_again, access=PUBLIC)
form("/login", auth.login_page, auth.login_post, auth.login_again, access=PUBLIC)
route("POST", "/logout", auth.logout_post, access=PUBLIC)
route("POST", "/logout-all", auth.logout_all_post, access=PUBLIC)
form("/reset-password", auth.reset_page, auth.reset_post, auth.reset_again, access=PUBLIC)
route(
    "POST",
    "/reset-password/confirm",
    auth.reset_confirm_post,
    access=PUBLIC,
    again=auth.reset_confirm_again,
)
form(
    "/invitations/accept",
    auth.invitation_page,
    auth.invitation_post,
    auth.invitation_again,
    access=PUBLIC,
)
route("GET", "/account", accounts.account_page)
route("POST", "/account/password", accounts.password_post, again=accounts.profile_again)
route("POST", "/account/names", accounts.names_post, again=accounts.profile_again)
route("GET", "/account/export", accounts.export_get)
route("POST", "/account/delete", accounts.delete_me_post, again=accounts.profile_again)
form("/accounts", accounts.accounts_page, accounts.create_post, accounts.accounts_again)
route("POST", "/accounts/switch", accounts.switch_post, again=accounts.accounts_again)
route("GET", MEMBERS, accounts.members_page)
members_form("/accounts/{id}/rename", accounts.rename)
members_form(MEMBERS + "/invite", accounts.invite)
members_form(MEMBERS + "/{userId}/role", accounts.change_role)
members_form(MEMBERS + "/{userId}/remove", accounts.remove)
members_form("/accounts/{id}/invitations/{iid}/resend", accounts.resend)
members_form("/accounts/{id}/invitations/{iid}/revoke", accounts.revoke)
members_form("/accounts/{id}/transfer", accounts.transfer)
members_form("/accounts/{id}/leave", accounts.leave)
members_form("/accounts/{id}/delete", accounts.delete)
route("GET", "/join-requests", accounts.join_requests_page)
route(
    "POST",
    "/join-requests/{rid}/{decision:approve|deny}",
    accounts.join_decision_post,
    again=accounts.join_requests_again,
)
route("GET", "/notifications", notifications.inbox_page)
route(
    "POST", "/notifications/read-all", notifications.read_all_post, again=notifications.inbox_again
)
route("POST", "/notifications/{id}/read", notifications.read_post, again=notifications.inbox_again)
form(
    "/notifications/preferences",
    preferences.preferences_page,
    preferences.preferences_post,
    preferences.preferences_again,
)
form(
    "/unsubscribe",
    notifications.unsubscribe_page,
    notifications.unsubscribe_post,
    notifications.unsubscribe_again,
    access=PUBLIC,
)
route("GET", "/tenantd-sw.js", service_worker, access=PUBLIC)
# two-factor authentication, step-up, email change (issues 17 and 18)
form("/login/mfa", mfa.login_mfa_page, mfa.login_mfa_post, mfa.login_mfa_again, access=PUBLIC)
route("POST", "/account/mfa/totp/setup", mfa.totp_setup_post, again=mfa.account_again)
route("POST", "/account/mfa/totp/confirm", mfa.totp_confirm_post, again=mfa.totp_confirm_again)
route("POST", "/account/mfa/totp/disable", mfa.totp_disable_post, again=mfa.account_again)
route("POST", "/account/mfa/recovery-codes", mfa.recovery_post, again=mfa.account_again)
route("POST", "/account/passkeys/{pid}/rename", mfa.passkey_rename_post, again=mfa.account_again)
route("POST", "/account/passkeys/{pid}/delete", mfa.passkey_delete_post, again=mfa.account_again)
route("POST", "/reauth", mfa.reauth_post, again=mfa.reauth_again)
route("POST", "/account/email", mfa.email_post, again=mfa.email_again)
route("GET", "/confirm-email", mfa.confirm_email_page, access=PUBLIC)
route("POST", "/confirm-email", mfa.confirm_email_post, again=mfa.confirm_email_again)
form(
    "/cancel-email-change",
    mfa.cancel_email_page,
    mfa.cancel_email_post,
    mfa.cancel_email_again,
    access=PUBLIC,
)
form("/wasnt-me", mfa.wasnt_me_page, mfa.wasnt_me_post, mfa.wasnt_me_again, access=PUBLIC)
members_form("/accounts/{id}/require-mfa", mfa.require_mfa_post)
route("POST", "/accounts/{id}/restore", accounts.restore_post, again=accounts.accounts_again)
# sign-in by email (issue 29)
form(
    "/login/email-code",
    email_codes.email_code_page,
    email_codes.email_code_post,
    email_codes.email_code_again,
    access=PUBLIC,
)
route(
    "POST",
    "/login/email-code/verify",
    email_codes.email_code_verify_post,
    access=PUBLIC,
    again=email_codes.email_code_verify_again,
)
form(
    "/email-code",
    email_codes.email_link_page,
    email_codes.email_link_post,
    email_codes.email_link_again,
    access=PUBLIC,
)
# notification frequency, quiet hours, language, account defaults (issue 18)
route(
    "POST",
    preferences.QUIET_HOURS,
    preferences.quiet_hours_post,
    again=preferences.quiet_hours_again,
)
form(
    preferences.DEFAULTS,
    preferences.defaults_page,
    preferences.defaults_post,
    preferences.defaults_again,
)
# an operator's impersonation link (issue 28)
route("GET", admin_pages.IMPERSONATE, admin_pages.impersonate_page, access=PUBLIC)
# the admin portal for the customer's IT (issue 30): a portal session, not a sign-in
route("GET", portal.PORTAL, portal.portal_page, access=PUBLIC)
route("POST", portal.PORTAL, portal.portal_open_post, access=PUBLIC)
form(portal.SSO, portal.sso_page, portal.sso_create_post, portal.sso_again, access=PUBLIC)
route("POST", portal.SSO_CONNECTION, portal.sso_update_post, access=PUBLIC, again=portal.sso_again)
form(
    portal.DIRECTORY,
    portal.directory_page,
    portal.directory_create_post,
    portal.directory_again,
    access=PUBLIC,
)


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


async def page_guard(request: web.Request, spec: RouteSpec) -> web.StreamResponse | tuple[Any, ...]:
    """A signed-in page gets its viewer; anyone else is sent to /login (and, from a GET,
    comes back after). A public page takes no viewer."""
    if spec.access is not Access.AUTH:
        return ()
    viewer = await load_viewer(request)
    if viewer is not None:
        return (viewer,)
    if request.method == "GET":
        return redirect(request, "/login?" + urlencode({"next": request.path_qs}))
    return redirect(request, "/login")


DOOR = PageDoor(guard=page_guard, refused=error_page_of, form=read_form)


async def error_page(request: web.Request, exc: AppError) -> web.StreamResponse:
    """The error answer of a person's request that reached no page (an unknown path, a wrong
    method) or broke one (500), in the pages' branded layout."""
    return error_page_of(request, exc)


def install_pages(app: web.Application, settings: Settings) -> bool:
    """When TENANTD_UI is on: the pages' error answer and /static (files, not pages: a miss
    is the API's 404). The pages themselves are routes of the one table (`ROUTES`): True
    when they are to be registered."""
    if not settings.web.hosted_pages:
        return False
    notice = passkeys_notice(settings)
    if notice is not None:
        log.warning(notice)
    app[ERROR_PAGE] = error_page
    app.router.add_get("/static/{name:.+}", static_file)  # GET and HEAD
    return True
