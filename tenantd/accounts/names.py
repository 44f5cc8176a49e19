"""Account naming rule: the names when present, else the email."""

from __future__ import annotations


def account_name(first_name: str | None, last_name: str | None, email: str) -> str:
    name = " ".join(part.strip() for part in (first_name or "", last_name or "") if part.strip())
    return name or email
