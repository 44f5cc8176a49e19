"""One cookie of a request without parsing them all.

`request.cookies` builds a Morsel per cookie through a regex parser: about 8% of a cached
`/me` (issue 19). The guards need one value, a token of URL-safe characters, so a plain
header is scanned with `str.split`; anything the scan could read differently from aiohttp
(a quoted value, a character outside the token alphabet) goes to `request.cookies`.
"""

from __future__ import annotations

import re

from aiohttp import hdrs, web

# JWTs (base64url segments and dots) and tenantd's opaque tokens use only these. A compiled
# match, not `frozenset.issuperset(value)`: that walks a ~450-character token one str at a
# time (~4% of a cached `/me`).
_PLAIN_TOKEN = re.compile(r"[A-Za-z0-9_.-]*")


def token_cookie(request: web.Request, name: str) -> str | None:
    """The value of cookie `name` as `request.cookies.get(name)` gives it (the last one when
    repeated), read straight from the header when the value is a plain token."""
    header = request.headers.get(hdrs.COOKIE)
    if not header:
        return None
    if '"' in header or "\\" in header:
        return request.cookies.get(name)
    found: str | None = None
    for part in header.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip() == name:
            found = value.strip()
    if found is None or _PLAIN_TOKEN.fullmatch(found) is None:
        return request.cookies.get(name)
    return found
