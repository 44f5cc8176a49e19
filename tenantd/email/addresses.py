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
