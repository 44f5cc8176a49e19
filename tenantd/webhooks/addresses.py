"""Where a webhook may not go: cloud metadata services.

Endpoint URLs are set by operators and may point at internal services, but never at an
instance metadata endpoint (credentials live there). The check runs on the address actually
connected to: the delivery session's resolver drops forbidden addresses from every DNS
answer (so a name that resolves there, or re-resolves there later, is refused at connect
time), and IP literals, which aiohttp connects to without resolving, are checked before.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

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


class ForbiddenAddress(OSError):
    """The destination is a cloud metadata address."""


@functools.lru_cache(maxsize=4096)  # a pure function of the text: asked once per delivery
def forbidden_ip(value: str) -> bool:
    try:
        address = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in METADATA_NETWORKS)


def check_url(url: str) -> str:
    """Refuse a URL that is not http(s) or names a metadata host or address; return it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the URL must be http:// or https:// with a host")
    host = parts.hostname.rstrip(".").lower()
    if host in METADATA_HOSTS or forbidden_ip(host):
        raise ForbiddenAddress(f"refused: {host} is a cloud metadata address")
    return url


class GuardedResolver(AbstractResolver):
    """A resolver that never hands a metadata address to the connector."""

    def __init__(self, inner: AbstractResolver | None = None):
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.rstrip(".").lower() in METADATA_HOSTS:
            raise ForbiddenAddress(f"refused: {host} is a cloud metadata address")
        answers = await self.inner.resolve(host, port, family)
        allowed = [answer for answer in answers if not forbidden_ip(answer["host"])]
        if not allowed:
            raise ForbiddenAddress(f"refused: {host} resolves to a cloud metadata address")
        return allowed

    async def close(self) -> None:
        await self.inner.close()
