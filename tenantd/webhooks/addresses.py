"""Where a webhook may not go: cloud metadata services, and with
TENANTD_WEBHOOK_REFUSE_PRIVATE=true any address that is not public (loopback, RFC 1918, link
local, unique local, ...).

Endpoint URLs are set by operators and may point at internal services (unless refused as
above), but never at an instance metadata endpoint (credentials live there). The check runs
on the address actually connected to: the delivery session's resolver drops forbidden
addresses from every DNS answer (so a name that resolves there, or re-resolves there later,
is refused at connect time), and IP literals, which aiohttp connects to without resolving,
are checked before.

An IPv6 address that carries an IPv4 address is judged by that IPv4 address too (whatever
the IPv6 form alone would say): IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
NAT64 `64:ff9b::a.b.c.d` (and the local-use `64:ff9b:1::/48`), 6to4 `2002:AABB:CCDD::/48` and
Teredo `2001:0::/32` (its server and its client address): each of them reaches the IPv4 host
through a translator or a tunnel.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from tenantd.settings import Settings
from tenantd.webhooks.settings import WebhookSettings

METADATA_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in (
        "169.254.0.0/16",  # link-local: AWS, GCP, Azure, OpenStack, Oracle, ECS (169.254.170.2)
        "fd00:ec2::254/128",  # AWS IMDS over IPv6
        "100.100.100.200/32",  # Alibaba Cloud
        "192.0.0.192/32",  # Oracle Cloud Classic
        "fe80::/10",  # IPv6 link-local
    )
)
METADATA_HOSTS = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
    }
)


def refuse_private(settings: Settings) -> bool:
    """TENANTD_WEBHOOK_REFUSE_PRIVATE: endpoints must be public addresses (default false:
    operators may point webhooks at their internal services)."""
    return settings.section(WebhookSettings).webhook_refuse_private


class ForbiddenAddress(OSError):
    """The destination is a cloud metadata address."""


NAT64_NETWORKS = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in IPV4_COMPATIBLE or any(address in net for net in NAT64_NETWORKS):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # (server, client), the client's bits de-obfuscated
    return found


def _judged(address: Address) -> list[Address]:
    """The address and every IPv4 address inside it: each must pass."""
    if isinstance(address, ipaddress.IPv6Address):
        return [address, *embedded_ipv4(address)]
    return [address]


@functools.lru_cache(maxsize=4096)  # a pure function of the text: asked once per delivery
def forbidden_ip(value: str, *, refuse_private: bool = False) -> bool:
    """Whether an IP literal is a metadata address (or, with `refuse_private`, not public),
    in any of its forms; a name is not an IP literal (False: the resolver judges it)."""
    try:
        address = ipaddress.ip_address(value.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    for candidate in _judged(address):
        if any(candidate in network for network in METADATA_NETWORKS):
            return True
        if refuse_private and not candidate.is_global:
            return True
    return False


def refusal(host: str, refuse_private: bool, verb: str = "is") -> str:
    kind = "a cloud metadata or private address" if refuse_private else "a cloud metadata address"
    return f"refused: {host} {verb} {kind}"


def check_url(url: str, *, refuse_private: bool = False) -> str:
    """Refuse a URL that is not http(s) or names a metadata host or address (or, with
    `refuse_private`, an address that is not public); return it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the URL must be http:// or https:// with a host")
    host = parts.hostname.rstrip(".").lower()
    if host in METADATA_HOSTS or forbidden_ip(host, refuse_private=refuse_private):
        raise ForbiddenAddress(refusal(host, refuse_private))
    return url


class GuardedResolver(AbstractResolver):
    """A resolver that never hands a metadata address (nor, with `refuse_private`, one that is
    not public) to the connector."""

    def __init__(self, inner: AbstractResolver | None = None, *, refuse_private: bool = False):
        self.inner = inner or DefaultResolver()
        self.refuse_private = refuse_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.rstrip(".").lower() in METADATA_HOSTS:
            raise ForbiddenAddress(refusal(host, self.refuse_private))
        answers = await self.inner.resolve(host, port, family)
        allowed = [
            answer
            for answer in answers
            if not forbidden_ip(answer["host"], refuse_private=self.refuse_private)
        ]
        if not allowed:
            raise ForbiddenAddress(refusal(host, self.refuse_private, "resolves to"))
        return allowed

    async def close(self) -> None:
        await self.inner.close()
