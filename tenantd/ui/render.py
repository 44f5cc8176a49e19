"""Jinja2 rendering of the pages: the shipped templates, overridable one by one from
TENANTD_UI_TEMPLATES_DIR, with the brand, the viewer, the catalog and CSRF tokens in scope."""

from __future__ import annotations

import datetime as dt
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from tenantd.auth import captcha
from tenantd.auth.oauth.presets import label as provider_label
from tenantd.email.settings import BrandSettings
from tenantd.identity.settings import SignInSettings
from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import SETTINGS
from tenantd.ui import csrf
from tenantd.ui.config import passkeys_here
from tenantd.ui.session import VIEWER, apply_session
from tenantd.ui.settings import PageSettings
from tenantd.ui.strings import event_label, text

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
ROLES = ("owner", "admin", "member")


# The pages' own environment, not `email.templates.mail_environment`: pages escape every
# template, trim block lines and carry the UI's globals; mail escapes HTML parts only and
# keeps trailing newlines.
@cache
def environment(override: Path | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if override is not None:
        loaders.append(jinja2.FileSystemLoader(override.absolute()))
    loaders.append(jinja2.FileSystemLoader(TEMPLATES))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["t"] = text
    env.globals["event_label"] = event_label
    env.globals["ROLES"] = ROLES
    return env


def _date(value: Any, with_time: bool = False) -> str:
    """A date as people read it (ui.js rewrites <time> elements into local time)."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value[:10]
    if not hasattr(value, "strftime"):
        return str(value)
    return str(value.strftime("%d %b %Y, %H:%M" if with_time else "%d %b %Y"))


def page(
    request: web.Request,
    template: str,
    *,
    status: int = 200,
    title: str = "",
    **context: Any,
) -> web.Response:
    """Render one page with the chrome's context; set the cookies the request decided on. A
    refusal shown (`problem` or `issue`) that names a retry time (429, 503) says Retry-After,
    as the API's answer does."""
    settings = request.app[SETTINGS]

    def token(action: str) -> str:
        return csrf.form_token(request, settings, action)

    # The bot check's widget, when a provider and its site key are set.
    widget = (
        captcha.provider(settings) if settings.section(SignInSettings).captcha_site_key else None
    )
    env = environment(settings.section(PageSettings).templates_dir)
    env.filters.setdefault("date", _date)
    env.filters.setdefault("provider_label", provider_label)
    body = env.get_template(template).render(
        brand=settings.section(BrandSettings),
        viewer=request.get(VIEWER),
        title=title,
        path=request.path,
        csrf_token=token,
        csrf_field=csrf.FIELD,
        web_push=settings.section(NotificationSettings).web_push_enabled,
        sse=settings.section(NotificationSettings).notifications_sse_enabled,
        providers=[p.name for p in settings.section(SignInSettings).oauth_providers],
        magic_link=settings.section(SignInSettings).magic_link_enabled,
        captcha=widget,
        captcha_site_key=settings.section(SignInSettings).captcha_site_key,
        passkeys_on=passkeys_here(settings, request.host),
        urlencode=urlencode,
        **context,
    )
    response = web.Response(text=body, content_type="text/html", status=status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Content-Security-Policy"] = content_security_policy(widget)
    shown = context.get("problem") or context.get("issue")
    retry_after(response, getattr(shown, "retry_after", None))
    finish(request, response)
    return response


def retry_after(response: web.StreamResponse, seconds: int | None) -> None:
    if seconds is not None:
        response.headers["Retry-After"] = str(seconds)


def content_security_policy(widget: captcha.Provider | None) -> str:
    """Our own origin only, plus the bot-check provider's origins when its widget is shown
    (its script, its frame, its styles and calls)."""
    extra = "".join(f" {origin}" for origin in widget.origins) if widget else ""
    policy = (
        "default-src 'self'; img-src 'self' data: https:;"
        f" style-src 'self' 'unsafe-inline'{extra}; script-src 'self'{extra};"
        f" connect-src 'self'{extra}; frame-ancestors 'none'; form-action 'self'"
    )
    return policy + (f"; frame-src{extra}" if widget else "")


def finish(request: web.Request, response: web.StreamResponse) -> None:
    settings = request.app[SETTINGS]
    csrf.remember(request, response, settings)
    apply_session(request, response, settings)


def redirect(request: web.Request, location: str) -> web.Response:
    """303 See Other after a form post (the browser follows with a GET)."""
    response = web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})
    finish(request, response)
    return response
