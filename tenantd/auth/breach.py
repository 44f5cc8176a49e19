"""Breached passwords (PASSWORD_BREACH_CHECK = off | warn | block): a new password is looked
up in Pwned Passwords' range API at registration, reset and change.

k-anonymity: only the first five hex characters of the password's SHA-1 leave the process
(`GET {PWNED_PASSWORDS_URL}/range/{PREFIX}` with `Add-Padding: true`); the answer lists
`SUFFIX:COUNT` lines for every hash under that prefix, padded with made-up suffixes whose
count is 0 (ignored here). The lookup is bounded by a short timeout: an API that cannot be
reached, is slow or answers garbage never blocks anyone; the first failure after a success is
logged and every failure is counted (`tenantd_password_breach_check_errors_total`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client import Counter

from tenantd.errors import ValidationFailed
from tenantd.identity.settings import SignInSettings

if TYPE_CHECKING:
    from tenantd.bundle import Services

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 2.0
BREACHED = "password_breached"
BREACHED_MESSAGE = f"{BREACHED}: this password appears in a known data breach; choose another one"

# Process-wide, registered into each application's registry by the metrics hook.
CHECK_ERRORS = Counter(
    "tenantd_password_breach_check_errors",
    "Breached-password lookups that failed (unreachable, slow or malformed answer)",
    registry=None,
)


class _Health:
    """Whether the last lookup worked: an outage is logged once, not once per sign-up."""

    up = True


async def check_password(services: Services, password: str) -> tuple[str, ...]:
    """Apply PASSWORD_BREACH_CHECK to a new password: `block` refuses a breached one (422,
    `details.fields.password` names password_breached); `warn` answers ("password_breached",)
    for the caller to pass on; otherwise (off, clean, or the lookup failed) ()."""
    mode = services.settings.section(SignInSettings).password_breach_check
    if mode == "off":
        return ()
    if not await is_breached(services, password):
        return ()
    if mode == "block":
        raise ValidationFailed({"password": BREACHED_MESSAGE})
    log.info("a breached password was accepted (PASSWORD_BREACH_CHECK=warn)")
    return (BREACHED,)


async def is_breached(services: Services, password: str) -> bool:
    """Whether the range API lists the password's hash with a count above 0; False when the
    lookup fails."""
    digest = hashlib.sha1(password.encode(), usedforsecurity=False).hexdigest().upper()
    prefix, suffix = digest[:5], digest[5:]
    url = f"{services.settings.section(SignInSettings).pwned_passwords_url}/range/{prefix}"
    try:
        async with asyncio.timeout(TIMEOUT_SECONDS):
            async with services.http.get(
                url, headers={"Add-Padding": "true"}, allow_redirects=False
            ) as response:
                if response.status != 200:
                    raise ValueError(f"status {response.status}")
                body = await response.text()
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as error:
        CHECK_ERRORS.inc()
        if _Health.up:
            _Health.up = False
            log.warning("breached-password check unavailable, passwords accepted: %r", error)
        return False
    _Health.up = True
    for line in body.splitlines():
        candidate, _, count = line.strip().partition(":")
        if candidate.upper() == suffix:
            return count.strip().isdigit() and int(count) > 0
    return False
