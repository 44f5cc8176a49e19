"""Opaque keyset cursors of the API's lists: a row's time and id, as unpadded base64url."""

from __future__ import annotations

import base64
import datetime as dt
import uuid

from tenantd.errors import ValidationFailed


def encode_keyset(at: dt.datetime, row_id: uuid.UUID) -> str:
    raw = f"{at.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_keyset(cursor: str, *, refusal: str) -> tuple[dt.datetime, uuid.UUID]:
    """The (time, id) a cursor names; one this server did not hand out is a 422 on `cursor`
    saying `refusal`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, row_id = raw.partition("|")
        moment = dt.datetime.fromisoformat(at)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, uuid.UUID(row_id)
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
        raise ValidationFailed({"cursor": refusal}) from None
