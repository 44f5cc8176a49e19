"""Web push endpoint policy (SSRF): which push service hosts may be contacted.

The endpoint must be https on a host of WEB_PUSH_ALLOWED_HOSTS (exact names, `*.suffix`
wildcards; an IP literal only when listed itself; an entry `http://host:port` allows plain
http to exactly that host and port).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import Settings


@dataclass(frozen=True)
class HostRule:
    scheme: str  # "https" or "http"
    host: str  # lower-case; "*.example.com" for a wildcard
    port: int | None  # None: the scheme's default port only

    def matches(self, scheme: str, host: str, port: int | None) -> bool:
        if scheme != self.scheme:
            return False
        default = 443 if scheme == "https" else 80
        if (port or default) != (self.port or default):
            return False
        if self.host.startswith("*."):
            suffix = self.host[1:]  # ".push.apple.com": a subdomain, never the bare suffix
            return host.endswith(suffix) and len(host) > len(suffix) and not _is_ip(host)
        return host == self.host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def host_rules(entries: tuple[str, ...]) -> list[HostRule]:
    rules = []
    for entry in entries:
        entry = entry.strip().lower()
        if not entry:
            continue
        if "://" in entry:
            parts = urlsplit(entry)
            if parts.scheme not in {"http", "https"} or not parts.hostname:
                continue
            rules.append(HostRule(parts.scheme, parts.hostname, parts.port))
        else:
            rules.append(HostRule("https", entry, None))
    return rules


def endpoint_problem(settings: Settings, endpoint: str) -> str | None:
    """Why this endpoint may not be contacted (SSRF policy), or None when it may."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        return "endpoint is not a valid URL"
    scheme = (parts.scheme or "").lower()
    host = (parts.hostname or "").lower()
    if scheme not in {"https", "http"} or not host:
        return "endpoint must be an https URL"
    if parts.username is not None or parts.password is not None:
        return "endpoint must not carry credentials"
    if any(ord(ch) < 33 for ch in endpoint):
        return "endpoint must not contain spaces or control characters"
    for rule in host_rules(settings.section(NotificationSettings).web_push_allowed_hosts):
        if rule.matches(scheme, host, port):
            return None
    if scheme != "https":
        return "endpoint must be an https URL"
    if _is_ip(host):
        return "endpoint host must not be an IP address"
    return "endpoint host is not an allowed push service"
