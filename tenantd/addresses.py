"""One normalisation of email addresses, used everywhere the suppression list is consulted."""

from __future__ import annotations


def normalize_email(address: str) -> str:
    """Trim and lower-case the domain part (the local part is case-sensitive by RFC 5321)."""
    address = address.strip()
    local, sep, domain = address.rpartition("@")
    if not sep:
        return address
    return f"{local}@{domain.lower()}"


def email_domain(address: str) -> str:
    return address.strip().rpartition("@")[2].lower()


MAX_EMAIL_LENGTH = 320


def is_plausible(address: str) -> bool:
    """A non-empty local part, '@', a domain, no whitespace or control characters."""
    if not address or len(address) > MAX_EMAIL_LENGTH:
        return False
    local, sep, domain = address.rpartition("@")
    if not (sep and local and domain):
        return False
    return not any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in address)
