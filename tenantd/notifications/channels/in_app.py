"""In-app channel: the stored notification is the delivery; the inbox reads it back.

Listing is keyset-paginated on (created_at, id), newest first; the cursor is opaque.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from typing import TYPE_CHECKING, Any

import orjson

from tenantd.db import Conn
from tenantd.errors import NotFound
from tenantd.notifications import queries
from tenantd.notifications.schemas import notification_json
from tenantd.web.cursors import decode_keyset, encode_keyset

if TYPE_CHECKING:
    from tenantd.notifications.domain import Notifications


def decode_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    return decode_keyset(cursor, refusal="invalid cursor")


async def list_inbox(
    conn: Conn, *, user_id: uuid.UUID, status: str, limit: int, cursor: str | None
) -> dict[str, Any]:
    """A page of the user's notifications, newest first, with the cursor of the next page.

    PostgreSQL renders the items as JSON; they are embedded in the answer as they are.
    """
    before = decode_cursor(cursor) if cursor else None
    page = await queries.inbox_page(conn, user_id=user_id, status=status, size=limit, before=before)
    next_cursor = None
    if page["more"]:
        next_cursor = encode_keyset(page["last_created_at"], page["last_id"])
    return {"items": orjson.Fragment(page["items"]), "nextCursor": next_cursor}


async def unread_count(conn: Conn, *, user_id: uuid.UUID) -> dict[str, int]:
    return {"count": await queries.unread_count(conn, user_id=user_id)}


async def mark_read(
    services: Notifications, *, user_id: uuid.UUID, notification_id: uuid.UUID
) -> dict[str, Any]:
    """unread -> read with readAt; only the recipient may, anyone else gets 404."""
    async with services.db.connection() as conn:
        row = await queries.mark_read(conn, user_id=user_id, notification_id=notification_id)
    if row is None:
        raise NotFound("Notification not found")
    return notification_json(row)


async def mark_all_read(services: Notifications, *, user_id: uuid.UUID) -> dict[str, int]:
    """Every unread notification of the user becomes read; answers how many."""
    async with services.db.connection() as conn:
        return {"updated": await queries.mark_all_read(conn, user_id=user_id)}


# The hot reads, answered from the inbox cache (notifications/inbox_cache.py) when it holds
# them, else from a replica when there are any (DATABASE_REPLICA_URLS) that has replayed the
# user's changes.
# Every write to the user's notifications announces `inbox:<user>` (sql/0071), which drops
# these entries at once on the writing instance and within milliseconds on the others (and
# marks the user: their next replica read waits for the primary's position after it).


async def inbox_page(
    services: Notifications,
    *,
    user_id: uuid.UUID,
    status: str,
    limit: int,
    cursor: str | None,
) -> orjson.Fragment:
    """A page of the inbox as pre-serialised JSON; first pages come from the cache."""
    cache = services.inbox_cache
    key = ("page", status, limit)
    if cursor is None:
        cached = cache.get(user_id, key)
        if cached is not None:
            return orjson.Fragment(cached)
    version = cache.version()
    page = await services.db.read(
        functools.partial(list_inbox, user_id=user_id, status=status, limit=limit, cursor=cursor),
        caller=user_id,  # a replica read waits for the user's own inbox changes
    )
    encoded = orjson.dumps(page)
    if cursor is None:
        cache.store(user_id, key, encoded, version)
    return orjson.Fragment(encoded)


async def cached_unread_count(services: Notifications, *, user_id: uuid.UUID) -> dict[str, int]:
    cache = services.inbox_cache
    cached = cache.get(user_id, "unread")
    if cached is not None:
        return {"count": cached}
    version = cache.version()
    count = await services.db.read(
        functools.partial(queries.unread_count, user_id=user_id), caller=user_id
    )
    cache.store(user_id, "unread", count, version)
    return {"count": count}
