"""Bot checks (CAPTCHA_PROVIDER): Cloudflare Turnstile, hCaptcha or Google reCAPTCHA v2,
verified server-side in the actions that need one (registration, email-code request,
password-reset request, and login after failures), so the API and the pages both get it.

All three providers take the same verification call: a form-encoded POST of `secret`,
`response` (the widget's token) and `remoteip` to their siteverify URL, answered with JSON
`{"success": true | false, "error-codes": [...], ...}`. A provider that cannot be reached, or
answers anything else, refuses the attempt (a bot check that fails open is no check).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from tenantd.auth.errors import CaptchaFailed
from tenantd.db import Conn
from tenantd.identity.settings import SignInSettings
from tenantd.ops.ratelimit import Counter, email_key, hit, ip_key, peek
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.bundle import Services

log = logging.getLogger(__name__)

VERIFY_TIMEOUT_SECONDS = 5.0
MAX_TOKEN_LENGTH = 4096  # Turnstile's are at most 2048 characters; reCAPTCHA's ~2000

# Login asks for a bot check once this many sign-ins failed inside the window, for the
# address or (more, since many people may share one) for the client's address.
LOGIN_FAILURES_PER_EMAIL = 3
LOGIN_FAILURES_PER_IP = 20
LOGIN_FAILURE_WINDOW_SECONDS = 900
_FAILED_SCOPE = "login_failed"


@dataclass(frozen=True)
class Provider:
    verify_url: str
    script: str  # the widget's script
    widget_class: str  # the div the script turns into a widget (data-sitekey on it)
    form_field: str  # the hidden field the widget adds to its form, holding the token
    origins: tuple[str, ...]  # what the pages' Content-Security-Policy must allow


PROVIDERS = {
    "turnstile": Provider(
        verify_url="https://challenges.cloudflare.com/turnstile/v0/siteverify",
        script="https://challenges.cloudflare.com/turnstile/v0/api.js",
        widget_class="cf-turnstile",
        form_field="cf-turnstile-response",
        origins=("https://challenges.cloudflare.com",),
    ),
    "hcaptcha": Provider(
        verify_url="https://api.hcaptcha.com/siteverify",
        script="https://js.hcaptcha.com/1/api.js",
        widget_class="h-captcha",
        form_field="h-captcha-response",
        origins=("https://hcaptcha.com", "https://*.hcaptcha.com"),
    ),
    "recaptcha": Provider(
        verify_url="https://www.google.com/recaptcha/api/siteverify",
        script="https://www.google.com/recaptcha/api.js",
        widget_class="g-recaptcha",
        form_field="g-recaptcha-response",
        origins=("https://www.google.com", "https://www.gstatic.com"),
    ),
}


def provider(settings: Settings) -> Provider | None:
    """The configured provider, or None when bot checks are off."""
    name = settings.section(SignInSettings).captcha_provider
    return PROVIDERS[name] if name else None


async def require(services: Services, *, token: str | None, ip: str | None) -> None:
    """Refuse (422 CAPTCHA_FAILED) unless the configured provider accepts `token`; nothing
    to do when no provider is configured."""
    settings = services.settings
    chosen = provider(settings)
    if chosen is None:
        return
    if not token or len(token) > MAX_TOKEN_LENGTH:
        raise CaptchaFailed()
    form = {"secret": settings.section(SignInSettings).captcha_secret or "", "response": token}
    if ip:
        form["remoteip"] = ip
    url = settings.section(SignInSettings).captcha_verify_url or chosen.verify_url
    try:
        async with asyncio.timeout(VERIFY_TIMEOUT_SECONDS):
            async with services.http.post(url, data=form, allow_redirects=False) as response:
                answer = await response.json(content_type=None) if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        log.warning(
            "bot check: %s could not be asked: %r",
            settings.section(SignInSettings).captcha_provider,
            error,
        )
        raise CaptchaFailed() from None
    if not isinstance(answer, dict) or answer.get("success") is not True:
        codes = answer.get("error-codes") if isinstance(answer, dict) else None
        log.info(
            "bot check refused by %s: %s", settings.section(SignInSettings).captcha_provider, codes
        )
        raise CaptchaFailed()


def _failure_counters(settings: Settings, *, email: str, ip: str | None) -> list[Counter]:
    window = LOGIN_FAILURE_WINDOW_SECONDS
    email_hash = email_key(settings.secret_key, email)
    counters = [Counter(f"{_FAILED_SCOPE}:email:{email_hash}", "email", 0, window)]
    if ip:
        counters.append(Counter(f"{_FAILED_SCOPE}:ip:{ip_key(ip)}", "ip", 0, window))
    return counters


async def login_needs_check(conn: Conn, settings: Settings, *, email: str, ip: str | None) -> bool:
    """Whether this login must pass a bot check: earlier failures for the address or the
    client reached their threshold inside the window (never when no provider is set)."""
    if provider(settings) is None:
        return False
    counts = await peek(conn, _failure_counters(settings, email=email, ip=ip))
    return (
        counts.get("email", 0) >= LOGIN_FAILURES_PER_EMAIL
        or counts.get("ip", 0) >= LOGIN_FAILURES_PER_IP
    )


async def count_login_failure(
    conn: Conn, settings: Settings, *, email: str, ip: str | None
) -> None:
    """One more failed sign-in for the address and the client (only while checks are on)."""
    if provider(settings) is not None:
        await hit(conn, _failure_counters(settings, email=email, ip=ip))
