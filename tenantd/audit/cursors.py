"""Opaque page cursors of the audit and security logs: the last id of a page, base64url."""

from __future__ import annotations

import base64
import binascii

from tenantd.errors import ValidationFailed

_PREFIX = "id:"


def encode(last_id: int | None) -> str | None:
    if last_id is None:
        return None
    return base64.urlsafe_b64encode(f"{_PREFIX}{last_id}".encode()).rstrip(b"=").decode()


def decode(cursor: str | None) -> int | None:
    """The id a page continues before; a cursor we did not hand out is a 422."""
    if not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text.startswith(_PREFIX):
            value = int(text[len(_PREFIX) :])
            if 0 < value < 2**63:
                return value
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ValidationFailed({"cursor": "invalid cursor"})
