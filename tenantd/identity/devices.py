"""Browsers: what a user agent string says (ua-parser), and whether a sign-in comes from a
browser this user has signed in from before.

"Seen" is the `device_id` cookie: a random value each browser gets at its first sign-in and
keeps for 400 days (renewed at every sign-in); the database stores only its keyed hash per
user (`known_devices`). A sign-in whose browser carries no cookie, or one never used by this
user, is from a new browser, except the user's very first recorded browser (the sign-up's
own sign-in, or the first sign-in after this feature shipped), which mails nothing.

The cookie also carries a tag naming the user of its last sign-in (`id.tag`): the login limit
then counts that browser's attempts for that user in a budget of its own (OWASP "device
cookies"), so wrong passwords sent from elsewhere do not lock the owner's browser out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ua_parser import parse

DEVICE_COOKIE_MAX_AGE = 400 * 24 * 3600  # the longest lifetime browsers grant a cookie
# The random id, then (issued since device budgets) a dot and the tag naming the user.
_DEVICE_VALUE = re.compile(r"^([A-Za-z0-9_-]{32,128})(?:\.[0-9a-f]{32})?$")


@dataclass(frozen=True)
class Agent:
    browser: str | None
    os: str | None


def _named(family: str | None, major: str | None) -> str | None:
    if not family or family == "Other":
        return None
    return f"{family} {major}" if major else family


def describe(user_agent: str | None) -> Agent:
    """Browser and OS of a User-Agent header ("Chrome 120", "Windows 10"); None when unknown."""
    if not user_agent:
        return Agent(None, None)
    return _describe(user_agent[:512])  # bounded keys: the cache stays small


@lru_cache(maxsize=4096)
def _describe(user_agent: str) -> Agent:
    result = parse(user_agent)
    browser = result.user_agent
    system = result.os
    return Agent(
        browser=_named(browser.family, browser.major) if browser else None,
        os=_named(system.family, system.major) if system else None,
    )


def usable_device_id(value: str | None) -> str | None:
    """The browser's id in its device cookie when it has the shape we hand out, else None."""
    found = _DEVICE_VALUE.match(value) if value else None
    return found.group(1) if found else None
