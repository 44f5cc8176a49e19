"""Pages of the inbox, notification preferences and the email unsubscribe confirmation."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tenantd.errors import AppError
from tenantd.notifications import preferences as prefs
from tenantd.notifications import unsubscribe as unsub
from tenantd.notifications.channels import in_app
from tenantd.notifications.domain import notifications_of
from tenantd.ui.forms import (
    Form,
    Problem,
    again_showing,
    done_notice,
    field,
    link_token,
    problem,
    problem_page,
)
from tenantd.ui.render import page, redirect
from tenantd.ui.session import Viewer, load_viewer
from tenantd.ui.strings import event_label, text
from tenantd.web.routing import path_uuid

PAGE_SIZE = 30


async def _inbox(
    request: web.Request, viewer: Viewer, *, issue: Problem | None = None
) -> web.Response:
    services = notifications_of(request.app)
    cursor = request.query.get("cursor") or None
    try:
        fragment = await in_app.inbox_page(
            services, user_id=viewer.principal.user_id, status="all", limit=PAGE_SIZE, cursor=cursor
        )
    except AppError:
        fragment = await in_app.inbox_page(
            services, user_id=viewer.principal.user_id, status="all", limit=PAGE_SIZE, cursor=None
        )
    data: dict[str, Any] = orjson.loads(orjson.dumps(fragment))
    unread = await in_app.cached_unread_count(services, user_id=viewer.principal.user_id)
    defaults_apply = await prefs.account_defaults_apply(
        services, user_id=viewer.principal.user_id, account_id=viewer.principal.account_id
    )
    return problem_page(
        request,
        "notifications.html",
        text("notifications.title"),
        issue,
        items=data["items"],
        next_cursor=data.get("nextCursor"),
        unread=unread["count"],
        defaults_apply=defaults_apply,
        notice=done_notice(request),
    )


async def inbox_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return await _inbox(request, viewer)


async def read_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    await in_app.mark_read(
        notifications_of(request.app),
        user_id=viewer.principal.user_id,
        notification_id=path_uuid(request, "id"),
    )
    return redirect(request, "/notifications?done=read")


inbox_again = again_showing(_inbox)


async def read_all_post(request: web.Request, viewer: Viewer, form: Form) -> web.StreamResponse:
    services = notifications_of(request.app)
    await in_app.mark_all_read(services, user_id=viewer.principal.user_id)
    return redirect(request, "/notifications?done=all_read")


def _unsubscribe(
    request: web.Request, *, token: str = "", event: str = "", done: bool = False
) -> web.Response:
    return page(
        request,
        "unsubscribe.html",
        title=text("unsubscribe.title"),
        token=token,
        event=event,
        done=done,
        problem=None,
    )


def _unsubscribe_refused(request: web.Request, exc: AppError) -> web.Response:
    issue = problem(exc)
    return page(
        request,
        "unsubscribe.html",
        status=issue.status,
        title=text("unsubscribe.title"),
        token="",
        event="",
        done=False,
        problem=issue,
    )


async def unsubscribe_page(request: web.Request) -> web.Response:
    await load_viewer(request)
    token = link_token(request)
    settings = notifications_of(request.app).settings
    try:
        claims = unsub.read_token(settings.secret_key, token)
    except AppError as exc:
        return _unsubscribe_refused(request, exc)
    return _unsubscribe(request, token=token, event=event_label(claims.event_type))


async def unsubscribe_post(request: web.Request, form: Form) -> web.Response:
    await load_viewer(request)
    services = notifications_of(request.app)
    claims = await unsub.unsubscribe(
        services.db, secret_key=services.settings.secret_key, token=field(form, "token")
    )
    return _unsubscribe(request, event=event_label(claims.event_type), done=True)


async def unsubscribe_again(request: web.Request, form: Form | None, exc: AppError) -> web.Response:
    await load_viewer(request)
    return _unsubscribe_refused(request, exc)
