"""Abuse limits backed by PostgreSQL, so they hold across every instance.

Fixed windows aligned on multiples of the window length: one `rate_limits` row per key
(`<scope>:ip:<address>`, `<scope>:email:<keyed hash>`, and for refresh
`<scope>:session:<sid>`; emails are never stored in the clear). All counters of a request move
in ONE upsert statement, which also starts a new window when the stored one has passed; the
request is refused when any counter is over its limit, with Retry-After = seconds until that
window ends.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from tenantd.addresses import normalize_email
from tenantd.db.core import Conn
from tenantd.errors import RateLimited
from tenantd.ops import queries
from tenantd.ops.config import MAIL_RATE_LIMITS, RateLimitSettings, RateRule
from tenantd.ops.queries import RATE_LIMIT_HIT, RATE_LIMIT_PEEK
from tenantd.ops.sweeps import SweepContext, delete_batches


@dataclass(frozen=True)
class Counter:
    key: str
    dimension: str  # "ip", "email", "session" or "user"
    limit: int
    window: int


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int
    dimension: str | None = None


def email_key(secret_key: str, email: str) -> str:
    """A keyed hash of the normalised, lower-cased address (no PII in rate_limits)."""
    normal = normalize_email(email).lower()
    digest = hmac.new(secret_key.encode(), b"rate:" + normal.encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


# A browser that signed in as a user before carries a device cookie naming that user (its
# random id, a dot, and this tag over id and address). OWASP's "device cookies": such a browser
# has a login budget of its own, so failures from anywhere else never lock it out.
DEVICE_TAG_HEX = 32


def device_tag(secret_key: str, device: str, email: str) -> str:
    """The device cookie's signature naming the user (by the normalised address)."""
    normal = normalize_email(email).lower()
    message = b"login-device:" + device.encode() + b":" + normal.encode()
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()[:DEVICE_TAG_HEX]


def signed_device(secret_key: str, device: str, email: str) -> str:
    """The device cookie value issued at a sign-in of `email` on browser `device`."""
    return f"{device}.{device_tag(secret_key, device, email)}"


def device_budget_key(secret_key: str, cookie: str | None, email: str | None) -> str | None:
    """The key of this browser's own login budget, when its device cookie was issued at a
    sign-in of `email`; None (the address's shared budget) for no, another or a forged one."""
    if not cookie or not email:
        return None
    device, dot, tag = cookie.rpartition(".")
    if not dot or not device or len(tag) != DEVICE_TAG_HEX:
        return None
    if not hmac.compare_digest(tag, device_tag(secret_key, device, email)):
        return None
    digest = hmac.new(secret_key.encode(), b"device:" + device.encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


def ip_key(address: str) -> str:
    """The client identity an IP limit counts: an IPv6 address by its /64 (one subscriber's
    or one host's block: walking through it must not buy fresh budgets), an IPv4-mapped IPv6
    address as its IPv4 address, anything else as given."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        prefix = ipaddress.IPv6Address(int(parsed) & ~((1 << 64) - 1))
        return f"{prefix}/64"
    return str(parsed)


def counters_for(
    scope: str,
    rule: RateRule,
    *,
    ip: str | None,
    email_hash: str | None,
    session: str | None = None,
    user: str | None = None,
    device: str | None = None,
) -> list[Counter]:
    """The counters of one attempt; with `device` (a device budget key) the browser's own
    budget takes the place of the address's shared one, at the same limit."""
    dimensions = (
        ("ip", ip_key(ip) if ip else None, rule.per_ip),
        ("device", device, rule.per_email),
        ("email", None if device else email_hash, rule.per_email),
        ("session", session, rule.per_session),
        ("user", user, rule.per_user),
    )
    return [
        Counter(f"{scope}:{dimension}:{value}", dimension, limit, rule.window_seconds)
        for dimension, value, limit in dimensions
        if value and limit > 0
    ]


async def hit(conn: Conn, counters: Sequence[Counter]) -> Verdict:
    """Count one attempt on every counter (one statement); refuse if any is over its limit."""
    if not counters:
        return Verdict(True, 0)
    values = ", ".join(f"(%(k{i})s, %(w{i})s::int)" for i in range(len(counters)))
    params: dict[str, object] = {}
    for i, counter in enumerate(counters):
        params[f"k{i}"] = counter.key
        params[f"w{i}"] = counter.window
    rows = await conn.fetch_all(RATE_LIMIT_HIT.format(values=values), params)
    by_key = {row["key"]: row for row in rows}
    worst: Verdict | None = None
    for counter in counters:
        row = by_key[counter.key]
        if row["count"] <= counter.limit:
            continue
        retry = max(1, math.ceil(row["start_offset"] + counter.window))
        if worst is None or retry > worst.retry_after:
            worst = Verdict(False, retry, counter.dimension)
    return worst or Verdict(True, 0)


async def peek(conn: Conn, counters: Sequence[Counter]) -> dict[str, int]:
    """How far each counter's dimension is in its current window, without counting."""
    if not counters:
        return {}
    rows = await conn.fetch_all(
        RATE_LIMIT_PEEK,
        {"keys": [counter.key for counter in counters], "secs": counters[0].window},
    )
    by_key = {row["key"]: int(row["count"]) for row in rows}
    return {counter.dimension: by_key.get(counter.key, 0) for counter in counters}


async def _limit(conn: Conn, limits: RateLimitSettings, scope: str, **keys: str | None) -> None:
    """Count one attempt of `scope` on the counters of `keys` (as `counters_for` takes them);
    RateLimited (429 with Retry-After) when one is over. Its callers return first while
    limits are off."""
    verdict = await hit(conn, counters_for(scope, limits.rule(scope), **keys))
    if not verdict.allowed:
        raise RateLimited(verdict.retry_after)


async def enforce(
    conn: Conn,
    limits: RateLimitSettings,
    *,
    secret_key: str,
    scope: str,
    ip: str | None,
    email: str | None,
    device_cookie: str | None = None,
) -> None:
    """Count this attempt of `scope` per IP and email; RateLimited (429 with Retry-After) when
    over a limit. A `device_cookie` issued at a sign-in of `email` counts in that browser's own
    budget instead of the address's shared one (`device_budget_key`)."""
    if not limits.enabled:
        return  # before the keyed hashes: no cost on the sign-in path while limits are off
    email_hash = email_key(secret_key, email) if email else None
    device = device_budget_key(secret_key, device_cookie, email)
    await _limit(conn, limits, scope, ip=ip, email_hash=email_hash, device=device)


async def limit_chosen_recipient(
    conn: Conn,
    limits: RateLimitSettings,
    *,
    secret_key: str,
    scope: str,
    user_id: uuid.UUID,
    recipient: str,
) -> None:
    """The limit of an action that mails an address its caller chose (`MAIL_RATE_LIMITS`):
    one attempt per acting user and per recipient (a keyed hash: no address in clear);
    RateLimited (429 with Retry-After) when either is over. Called inside the action, so
    every entry point (API, hosted page, any later route) is limited alike."""
    if scope not in MAIL_RATE_LIMITS:
        raise ValueError(f"{scope} is not a mail action scope")
    if not limits.enabled:
        return
    recipient_hash = email_key(secret_key, recipient)
    await _limit(conn, limits, scope, ip=None, email_hash=recipient_hash, user=str(user_id))


def client_ip(
    peer: str | None,
    forwarded_for: str | None,
    trusted: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> str | None:
    """The client address: the peer, unless the peer is a trusted proxy, in which case the
    right-most X-Forwarded-For entry that is not itself a trusted proxy."""

    def is_trusted(value: str) -> bool:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            return False
        return any(address in network for network in trusted)

    if peer is None or not trusted or not is_trusted(peer) or not forwarded_for:
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not is_trusted(hop):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a malformed hop: fall back to what we know
    return hops[0] if hops else peer


async def expired_counters(ctx: SweepContext) -> None:
    """The session sweep's part for counters: those whose window ended longer ago than the
    longest window."""
    window = timedelta(seconds=ctx.settings.section(RateLimitSettings).longest_window)
    await delete_batches(ctx, *queries.counters_ended_before(window))
