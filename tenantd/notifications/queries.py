"""Statements of the notifications domain; each takes the connection it is given."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
from psycopg2.extras import Json

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared
from tenantd.db.fetch import fetch_column, fetch_row
from tenantd.db.predicates import affected, exists

NOTIFICATION_COLUMNS = (
    "id, event_type, title, body, cta_url, cta_label, status, read_at, created_at"
)

# The whole dispatch in one statement (one round trip, atomic even without BEGIN): the
# function of sql/functions/notification_dispatch.sql (recipient, dedup, preferences, the
# notification, its delivery rows, the SSE announcement): what DISPATCH_BATCH_SQL does for
# one send, at about half its database CPU.
DISPATCH_SQL = Prepared(
    "tenantd_notification_dispatch_one",
    "SELECT * FROM tenantd_notification_dispatch(%(id)s::uuid, %(uid)s::uuid, %(aid)s::uuid,"
    " %(type)s::text, %(title)s::text, %(body)s::text, %(cta_url)s::text, %(cta_label)s::text,"
    " %(payload)s::jsonb, %(dedup_key)s::text, %(window)s::float8, %(channels)s::text[],"
    " %(forced_reason)s::text, %(critical)s::boolean, %(topic)s::text)",
)

# Many dispatches in one set-based statement (sql/functions/notification_dispatch.sql): the
# same answer per row as DISPATCH_SQL would give them run one after another in the order
# given, one answer row per dispatch in that order, and one insert per table for the batch
# (so statement triggers fire once). Channel lists are comma-joined (arrays of arrays must be
# rectangular) and payloads are JSON text (a prepared statement takes no array of Json).
DISPATCH_BATCH_SQL = Prepared(
    "tenantd_notification_dispatch_batch",
    "SELECT user_found, time_zone, quiet_hours_start, quiet_hours_end, id, created_at,"
    " pending, published"
    " FROM tenantd_notification_dispatch_batch(%(ids)s::uuid[], %(uids)s::uuid[],"
    " %(aids)s::uuid[], %(types)s::text[], %(titles)s::text[], %(bodies)s::text[],"
    " %(cta_urls)s::text[], %(cta_labels)s::text[], %(payloads)s::text[],"
    " %(dedup_keys)s::text[], %(windows)s::float8[], %(channels)s::text[], %(forced)s::text[],"
    " %(critical)s::boolean[], %(topics)s::text[]) ORDER BY n",
)


def user_topic(user_id: uuid.UUID | str) -> str:
    """The pub/sub channel of a user's notifications (55 bytes: under the 63-byte limit)."""
    return f"notifications:user:{user_id}"


@dataclasses.dataclass(frozen=True)
class NewNotification:
    """A notification to persist, with one delivery row per channel.

    `forced_reason`: every row `suppressed` with this reason (a throttled send); `critical`:
    the user's disabled preferences do not apply."""

    notification_id: uuid.UUID
    user_id: uuid.UUID
    account_id: uuid.UUID | None
    event_type: str
    title: str
    body: str
    cta_url: str
    cta_label: str
    payload: dict[str, Any]
    dedup_key: str | None
    window_seconds: int
    channels: Sequence[str]
    forced_reason: str | None = None
    critical: bool = False


async def persist_dispatch(conn: Conn, notification: NewNotification) -> Row:
    """Persist a notification and its delivery rows (idempotent on its id)."""
    parameters = dispatch_parameters(notification)
    row = await fetch_row(conn, DISPATCH_SQL, {**parameters, "payload": Json(notification.payload)})
    if row["published"]:  # announcement rows: the relay publishes them after commit
        conn.announced()
    return row


def dispatch_parameters(notification: NewNotification) -> dict[str, Any]:
    """DISPATCH_SQL's parameters (payload not yet adapted)."""
    return {
        "forced_reason": notification.forced_reason,
        "critical": notification.critical,
        "id": notification.notification_id,
        "uid": notification.user_id,
        "aid": notification.account_id,
        "type": notification.event_type,
        "title": notification.title,
        "body": notification.body,
        "cta_url": notification.cta_url,
        "cta_label": notification.cta_label,
        "payload": notification.payload,
        "dedup_key": notification.dedup_key,
        "window": notification.window_seconds,
        "channels": list(notification.channels),
        "topic": user_topic(notification.user_id),
    }


async def persist_dispatches(conn: Conn, parameters: Sequence[dict[str, Any]]) -> list[Row]:
    """Many `dispatch_parameters` in one statement, in order: one answer each, as
    persist_dispatch gives it."""
    rows = await conn.fetch_all(
        DISPATCH_BATCH_SQL,
        {
            "ids": [p["id"] for p in parameters],
            "uids": [p["uid"] for p in parameters],
            "aids": [p["aid"] for p in parameters],
            "types": [p["type"] for p in parameters],
            "titles": [p["title"] for p in parameters],
            "bodies": [p["body"] for p in parameters],
            "cta_urls": [p["cta_url"] for p in parameters],
            "cta_labels": [p["cta_label"] for p in parameters],
            "payloads": [orjson.dumps(p["payload"]).decode() for p in parameters],
            "dedup_keys": [p["dedup_key"] for p in parameters],
            "windows": [float(p["window"]) for p in parameters],
            "channels": [",".join(p["channels"]) for p in parameters],
            "forced": [p["forced_reason"] for p in parameters],
            "critical": [p["critical"] for p in parameters],
            "topics": [p["topic"] for p in parameters],
        },
    )
    assert len(rows) == len(parameters)
    if any(row["published"] for row in rows):
        conn.announced()
    return rows


async def user_exists(conn: Conn, *, user_id: uuid.UUID) -> bool:
    return await exists(conn, "SELECT 1 FROM users WHERE id = %(uid)s::uuid", {"uid": user_id})


async def missing_users(conn: Conn, *, user_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `user_ids` have no user row (one query for a whole batch)."""
    return set(
        await fetch_column(
            conn,
            "SELECT u.id FROM unnest(%(ids)s::uuid[]) AS u(id)"
            " WHERE NOT EXISTS (SELECT 1 FROM users WHERE users.id = u.id)",
            {"ids": list(set(user_ids))},
        )
    )


async def delivery_context(conn: Conn, *, notification_id: uuid.UUID, channel: str) -> Row | None:
    """A notification with its recipient's address and the status of one channel's row."""
    return await conn.fetch_one(
        f"SELECT {', '.join('n.' + c for c in NOTIFICATION_COLUMNS.split(', '))},"
        " n.user_id, n.payload, u.email, u.locale, d.status AS delivery_status"
        " FROM notifications n"
        " JOIN users u ON u.id = n.user_id"
        " JOIN notification_deliveries d ON d.notification_id = n.id AND d.channel = %(ch)s"
        " WHERE n.id = %(id)s",
        {"id": notification_id, "ch": channel},
    )


async def settle_delivery(
    conn: Conn,
    *,
    notification_id: uuid.UUID,
    channel: str,
    status: str,
    reason: str | None = None,
) -> bool:
    """pending -> sent/failed/suppressed, once (a settled row is never changed again)."""
    count = await conn.execute(
        "UPDATE notification_deliveries"
        " SET status = %(status)s, reason = %(reason)s, attempts = attempts + 1,"
        " updated_at = now()"
        " WHERE notification_id = %(id)s AND channel = %(ch)s AND status = 'pending'",
        {"id": notification_id, "ch": channel, "status": status, "reason": reason},
    )
    return count > 0


async def count_attempt(conn: Conn, *, notification_id: uuid.UUID, channel: str) -> None:
    await conn.execute(
        "UPDATE notification_deliveries SET attempts = attempts + 1, updated_at = now()"
        " WHERE notification_id = %(id)s AND channel = %(ch)s AND status = 'pending'",
        {"id": notification_id, "ch": channel},
    )


# --- in-app inbox -------------------------------------------------------------------------


def _inbox_page_query(status: str, after_cursor: bool) -> Prepared:
    """One page of the inbox as JSON text built by PostgreSQL, plus the next-page anchor.

    The page is fetched with one extra row (`fetch` = size + 1) to know whether more follow.
    """
    where = ["user_id = %(uid)s", "in_app"]
    if status in ("unread", "read"):
        where.append(f"status = '{status}'")
    if after_cursor:
        where.append("(created_at, id) < (%(c)s::timestamptz, %(i)s::uuid)")
    stamp = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    return Prepared(
        f"tenantd_inbox_{status}_{'after' if after_cursor else 'first'}",
        f"""
WITH page AS (
    SELECT {NOTIFICATION_COLUMNS},
           row_number() OVER (ORDER BY created_at DESC, id DESC) AS n
      FROM (SELECT {NOTIFICATION_COLUMNS} FROM notifications
             WHERE {" AND ".join(where)}
             ORDER BY created_at DESC, id DESC LIMIT %(fetch)s::int) newest
)
SELECT COALESCE(json_agg(json_build_object(
           'id', id, 'eventType', event_type, 'title', title, 'body', body,
           'ctaUrl', cta_url, 'ctaLabel', cta_label, 'status', status,
           'readAt', {stamp.format("read_at")}, 'createdAt', {stamp.format("created_at")})
         ORDER BY n) FILTER (WHERE n <= %(size)s::int), '[]')::text AS items,
       COALESCE(max(n) > %(size)s::int, false) AS more,
       max(created_at) FILTER (WHERE n = %(size)s::int) AS last_created_at,
       (array_agg(id) FILTER (WHERE n = %(size)s::int))[1] AS last_id
  FROM page
""",
    )


INBOX_PAGES = {
    (status, after): _inbox_page_query(status, after)
    for status in ("all", "unread", "read")
    for after in (False, True)
}


async def inbox_page(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    status: str,
    size: int,
    before: tuple[dt.datetime, uuid.UUID] | None,
) -> Row:
    """Newest first, keyset-paginated on (created_at, id): {items (JSON text), more, last_*}."""
    params: dict[str, Any] = {"uid": user_id, "size": size, "fetch": size + 1}
    if before is not None:
        params.update(c=before[0], i=before[1])
    return await fetch_row(conn, INBOX_PAGES[(status, before is not None)], params)


UNREAD_COUNT = Prepared(
    "tenantd_notification_unread_count",
    "SELECT count(*) FROM notifications"
    " WHERE user_id = %(uid)s::uuid AND status = 'unread' AND in_app",
)


async def unread_count(conn: Conn, *, user_id: uuid.UUID) -> int:
    count: int = await conn.fetch_val(UNREAD_COUNT, {"uid": user_id})
    return count


async def mark_read(conn: Conn, *, user_id: uuid.UUID, notification_id: uuid.UUID) -> Row | None:
    """Read once: a second call keeps the first readAt."""
    return await conn.fetch_one(
        "WITH upd AS (UPDATE notifications SET status = 'read', read_at = now()"
        "  WHERE id = %(id)s AND user_id = %(uid)s AND in_app AND status = 'unread'"
        f"  RETURNING {NOTIFICATION_COLUMNS})"
        " SELECT * FROM upd UNION ALL"
        f" SELECT {NOTIFICATION_COLUMNS} FROM notifications"
        "  WHERE id = %(id)s AND user_id = %(uid)s AND in_app AND NOT EXISTS (SELECT 1 FROM upd)",
        {"id": notification_id, "uid": user_id},
    )


async def mark_all_read(conn: Conn, *, user_id: uuid.UUID) -> int:
    return await conn.execute(
        "UPDATE notifications SET status = 'read', read_at = now()"
        " WHERE user_id = %(uid)s AND status = 'unread' AND in_app",
        {"uid": user_id},
    )


# --- SSE ----------------------------------------------------------------------------------


NOTIFICATION_FOR_USER = Prepared(
    "tenantd_notification_for_user",
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications"
    " WHERE id = %(id)s::uuid AND user_id = %(uid)s::uuid",
)


async def notification_for_user(
    conn: Conn, *, notification_id: uuid.UUID, user_id: uuid.UUID
) -> Row | None:
    return await conn.fetch_one(NOTIFICATION_FOR_USER, {"id": notification_id, "uid": user_id})


SSE_NOTIFICATIONS = Prepared(
    "tenantd_sse_notifications",
    f"SELECT user_id, {NOTIFICATION_COLUMNS} FROM notifications WHERE id = ANY(%(ids)s::uuid[])",
)


async def sse_notifications(conn: Conn, *, ids: Sequence[uuid.UUID]) -> list[Row]:
    """The notifications the SSE feed was told of, in one round trip (their user_id too, so
    the feed offers each only to the user whose channel named it)."""
    return await conn.fetch_all(SSE_NOTIFICATIONS, {"ids": list(ids)})


async def sse_notifications_after(
    conn: Conn, *, user_id: uuid.UUID, after_id: uuid.UUID, limit: int, lookback_seconds: float
) -> list[Row]:
    """What an SSE client may have missed after `after_id`, oldest first: every SSE-sent
    notification after it (up to `limit`), and those created up to `lookback_seconds` before
    it (up to `limit` more). `created_at` is its transaction's start, so a notification that
    started before `after_id` may have committed, and been published, after it; the look-back
    sends it again rather than lose it (a client drops ids it has: at least once)."""
    columns = ", ".join("n." + c for c in NOTIFICATION_COLUMNS.split(", "))
    rows = (
        f" SELECT {columns} FROM notifications n"
        " JOIN notifications ref ON ref.id = %(after)s AND ref.user_id = %(uid)s"
        " JOIN notification_deliveries d"
        "   ON d.notification_id = n.id AND d.channel = 'sse' AND d.status = 'sent'"
        " WHERE n.user_id = %(uid)s AND n.id <> ref.id AND {where}"
        " ORDER BY n.created_at, n.id LIMIT %(limit)s"
    )
    after = "(n.created_at, n.id) > (ref.created_at, ref.id)"
    before = (
        "(n.created_at, n.id) < (ref.created_at, ref.id)"
        " AND n.created_at > ref.created_at - make_interval(secs => %(lookback)s)"
    )
    return await conn.fetch_all(
        f"SELECT * FROM (({rows.format(where=before)}) UNION ALL ({rows.format(where=after)}))"
        " replay ORDER BY created_at, id",
        {"uid": user_id, "after": after_id, "limit": limit, "lookback": lookback_seconds},
    )


# --- preferences --------------------------------------------------------------------------


async def preferences(conn: Conn, *, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT event_type, channel, enabled FROM notification_preferences WHERE user_id = %(uid)s",
        {"uid": user_id},
    )


def _channel_setting_upsert(table: str, column: str) -> str:
    """Set a user's `column` of one (event type, channel) in `table`, while the user exists."""
    return (
        f"INSERT INTO {table} (user_id, event_type, channel, {column})"
        " SELECT %(uid)s, %(type)s, %(ch)s, %(value)s WHERE EXISTS (SELECT 1 FROM users"
        "  WHERE id = %(uid)s)"
        " ON CONFLICT (user_id, event_type, channel)"
        f" DO UPDATE SET {column} = EXCLUDED.{column}, updated_at = now()"
    )


SET_PREFERENCE = _channel_setting_upsert("notification_preferences", "enabled")
SET_FREQUENCY = _channel_setting_upsert("notification_frequencies", "frequency")


async def set_preference(
    conn: Conn, *, user_id: uuid.UUID, event_type: str, channel: str, enabled: bool
) -> None:
    await conn.execute(
        SET_PREFERENCE, {"uid": user_id, "type": event_type, "ch": channel, "value": enabled}
    )


async def frequencies(
    conn: Conn, *, user_id: uuid.UUID, event_type: str | None = None
) -> list[Row]:
    """The user's chosen frequencies (of one event type, or all)."""
    return await conn.fetch_all(
        "SELECT event_type, channel, frequency FROM notification_frequencies"
        " WHERE user_id = %(uid)s AND (%(type)s::text IS NULL OR event_type = %(type)s)",
        {"uid": user_id, "type": event_type},
    )


async def set_frequency(
    conn: Conn, *, user_id: uuid.UUID, event_type: str, channel: str, frequency: str
) -> None:
    await conn.execute(
        SET_FREQUENCY, {"uid": user_id, "type": event_type, "ch": channel, "value": frequency}
    )


# --- push subscriptions -------------------------------------------------------------------

SUBSCRIPTION_COLUMNS = "id, endpoint, user_agent, expires_at, created_at, last_used_at"


async def lock_push_subscriptions(conn: Conn, *, user_id: uuid.UUID) -> None:
    """Serialise one user's subscribes (transaction-scoped), so none can pass the cap together."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('push-subscriptions:' || %(uid)s, 0))",
        {"uid": str(user_id)},
    )


async def upsert_subscription(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    endpoint: str,
    p256dh: str,
    auth: str,
    user_agent: str | None,
    expires_at: dt.datetime | None,
    keep_at_most: int,
) -> Row:
    """Upsert on (user, endpoint), keys rotate; then the user's oldest beyond `keep_at_most` go.

    Other users' rows for the same endpoint stay: a browser profile shared by two people is
    subscribed by each. Run under lock_push_subscriptions.
    """
    row = await fetch_row(
        conn,
        "INSERT INTO push_subscriptions"
        " (user_id, endpoint, p256dh_key, auth_key, user_agent, expires_at, created_at)"
        # clock_timestamp(), not now(): taken after the lock, so creation order is lock order.
        " VALUES (%(uid)s, %(e)s, %(p)s, %(a)s, %(ua)s, %(exp)s, clock_timestamp())"
        " ON CONFLICT (user_id, endpoint) DO UPDATE SET p256dh_key = EXCLUDED.p256dh_key,"
        " auth_key = EXCLUDED.auth_key, user_agent = EXCLUDED.user_agent,"
        f" expires_at = EXCLUDED.expires_at RETURNING {SUBSCRIPTION_COLUMNS}",
        {
            "uid": user_id,
            "e": endpoint,
            "p": p256dh,
            "a": auth,
            "ua": user_agent,
            "exp": expires_at,
        },
    )
    await conn.execute(
        "DELETE FROM push_subscriptions WHERE id IN (SELECT id FROM push_subscriptions"
        " WHERE user_id = %(uid)s AND id <> %(kept)s"
        " ORDER BY created_at DESC, id DESC OFFSET %(others)s)",
        {"uid": user_id, "kept": row["id"], "others": keep_at_most - 1},
    )
    return row


async def delete_subscription(conn: Conn, *, user_id: uuid.UUID, endpoint: str) -> int:
    return await conn.execute(
        "DELETE FROM push_subscriptions WHERE user_id = %(uid)s AND endpoint = %(e)s",
        {"uid": user_id, "e": endpoint},
    )


async def list_subscriptions(conn: Conn, *, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        f"SELECT {SUBSCRIPTION_COLUMNS} FROM push_subscriptions WHERE user_id = %(uid)s"
        " ORDER BY created_at, id",
        {"uid": user_id},
    )


async def live_subscriptions(conn: Conn, *, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT id, endpoint, p256dh_key, auth_key FROM push_subscriptions"
        " WHERE user_id = %(uid)s AND (expires_at IS NULL OR expires_at > now())",
        {"uid": user_id},
    )


async def touch_subscriptions(conn: Conn, *, ids: Sequence[uuid.UUID]) -> None:
    await conn.execute(
        "UPDATE push_subscriptions SET last_used_at = now() WHERE id = ANY(%(ids)s)",
        {"ids": list(ids)},
    )


async def delete_subscriptions(conn: Conn, *, ids: Sequence[uuid.UUID]) -> int:
    return await conn.execute(
        "DELETE FROM push_subscriptions WHERE id = ANY(%(ids)s)", {"ids": list(ids)}
    )


@dataclasses.dataclass(frozen=True)
class Expiring:
    """A table of keys that expire: dedup records, throttle windows."""

    table: str
    key: str
    expired: str  # the SQL test of a row whose time is up


# A dedup key counts until its expiry; a throttle window has ended at its expiry.
EXPIRED_DEDUP = Expiring("notification_dedup", "dedup_key", "expires_at < now()")
EXPIRED_THROTTLES = Expiring("notification_throttles", "throttle_key", "expires_at <= now()")


async def count_expired(conn: Conn, kind: Expiring) -> int:
    count: int = await conn.fetch_val(f"SELECT count(*) FROM {kind.table} WHERE {kind.expired}")
    return count


async def delete_expired(conn: Conn, kind: Expiring, *, batch_size: int) -> int:
    """One batch of expired keys; a key taken or counted again meanwhile (a future expiry)
    stays."""
    return await conn.execute(
        f"DELETE FROM {kind.table} WHERE {kind.key} IN ("
        f" SELECT {kind.key} FROM {kind.table} WHERE {kind.expired}"
        f" LIMIT %(batch)s FOR UPDATE SKIP LOCKED) AND {kind.expired}",
        {"batch": batch_size},
    )


# -- throttle and scheduled sends (issue 18) ---------------------------------------------------


async def count_throttled(conn: Conn, *, key: str, window_seconds: int) -> int:
    """Count one send against the key's fixed window (a new window starts when it ran out)."""
    count: int = await conn.fetch_val(
        "INSERT INTO notification_throttles AS t (throttle_key, window_start, count, expires_at)"
        " VALUES (%(k)s, now(), 1, now() + make_interval(secs => %(w)s))"
        " ON CONFLICT (throttle_key) DO UPDATE SET"
        " count = CASE WHEN t.window_start <= now() - make_interval(secs => %(w)s)"
        "   THEN 1 ELSE t.count + 1 END,"
        " window_start = CASE WHEN t.window_start <= now() - make_interval(secs => %(w)s)"
        "   THEN now() ELSE t.window_start END,"
        " expires_at = CASE WHEN t.window_start <= now() - make_interval(secs => %(w)s)"
        "   THEN now() ELSE t.window_start END + make_interval(secs => %(w)s)"
        " RETURNING count",
        {"k": key, "w": window_seconds},
    )
    return count


async def claim_dedup(conn: Conn, *, key: str, window_seconds: int) -> bool:
    """Take the dedup key for `window_seconds` (as the dispatch statement does): False while
    another send holds it. A concurrent claim of the same key waits for this transaction."""
    return await affected(
        conn,
        "INSERT INTO notification_dedup (dedup_key, expires_at)"
        " VALUES (%(k)s, now() + make_interval(secs => %(w)s::float8))"
        " ON CONFLICT (dedup_key) DO UPDATE"
        "    SET expires_at = EXCLUDED.expires_at, created_at = now()"
        "  WHERE notification_dedup.expires_at <= now()",
        {"k": key, "w": window_seconds},
    )


async def digest_send_seen(conn: Conn, *, ids: Sequence[uuid.UUID]) -> bool:
    """A digest event's send ran before (a re-run job): one of its item ids or its
    notification (a throttled send's) exists."""
    seen: bool = await conn.fetch_val(
        "SELECT EXISTS (SELECT 1 FROM notification_digest_items WHERE item_id = ANY(%(ids)s))"
        " OR EXISTS (SELECT 1 FROM notifications WHERE id = ANY(%(ids)s))",
        {"ids": list(ids)},
    )
    return seen


async def notification_exists(conn: Conn, notification_id: uuid.UUID) -> bool:
    return await exists(
        conn, "SELECT 1 FROM notifications WHERE id = %(id)s", {"id": notification_id}
    )


async def scheduled_by_key(conn: Conn, idempotency_key: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT notification_id, job_id, cancelled_at FROM scheduled_notifications"
        " WHERE idempotency_key = %(k)s",
        {"k": idempotency_key},
    )


async def insert_scheduled(
    conn: Conn,
    *,
    notification_id: uuid.UUID,
    idempotency_key: str | None,
    job_id: int,
    event_type: str,
    user_id: uuid.UUID,
    delay_seconds: float,
) -> None:
    await conn.execute(
        "INSERT INTO scheduled_notifications (notification_id, idempotency_key, job_id,"
        " event_type, recipient_user_id, deliver_at) VALUES (%(id)s, %(k)s, %(j)s, %(t)s,"
        " %(u)s, now() + make_interval(secs => %(d)s))",
        {
            "id": notification_id,
            "k": idempotency_key,
            "j": job_id,
            "t": event_type,
            "u": user_id,
            "d": delay_seconds,
        },
    )


async def lock_scheduled(
    conn: Conn, *, notification_id: uuid.UUID | None, idempotency_key: str | None
) -> Row | None:
    return await conn.fetch_one(
        "SELECT notification_id, job_id, cancelled_at FROM scheduled_notifications"
        " WHERE notification_id = %(id)s OR (%(k)s::text IS NOT NULL AND idempotency_key = %(k)s)"
        " FOR UPDATE",
        {"id": notification_id, "k": idempotency_key},
    )


async def mark_scheduled_cancelled(conn: Conn, notification_id: uuid.UUID) -> None:
    await conn.execute(
        "UPDATE scheduled_notifications SET cancelled_at = now() WHERE notification_id = %(id)s",
        {"id": notification_id},
    )


async def lock_idempotency_key(conn: Conn, idempotency_key: str) -> None:
    """Serialise schedulers of one key until the transaction ends."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtext(%(k)s))", {"k": "notif:" + idempotency_key}
    )


# -- digests (tenantd/notifications/digests.py) -------------------------------------------------


async def join_digest(
    conn: Conn,
    *,
    digest_key: str,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    event_type: str,
    channels: Sequence[str] | None = None,
) -> Row:
    """The open digest of the key (created if none: `created` true), row-locked until commit,
    so a flush waits for this item and an item never joins a flushed digest. `channels`
    (None: every channel of the event) is the key's: the caller puts it in the key."""
    return await fetch_row(
        conn,
        "INSERT INTO notification_digests AS d"
        " (digest_key, user_id, account_id, event_type, channels)"
        " VALUES (%(k)s, %(u)s, %(a)s, %(t)s, %(ch)s)"
        " ON CONFLICT (digest_key) WHERE flushed_at IS NULL"
        " DO UPDATE SET event_type = d.event_type"
        " RETURNING id, (xmax = 0) AS created",
        {
            "k": digest_key,
            "u": user_id,
            "a": account_id,
            "t": event_type,
            "ch": list(channels) if channels is not None else None,
        },
    )


async def add_digest_item(
    conn: Conn,
    *,
    digest_id: uuid.UUID,
    item_id: uuid.UUID,
    payload: dict[str, Any],
    send_sequence: int | None = None,
) -> None:
    """`send_sequence`: the send's place in send order (its dispatch job's id)."""
    await conn.execute(
        # clock_timestamp: items added in one transaction (a dispatch batch) keep their order.
        "INSERT INTO notification_digest_items"
        " (item_id, digest_id, payload, created_at, send_sequence)"
        " VALUES (%(i)s, %(d)s, %(p)s, clock_timestamp(), %(s)s)"
        " ON CONFLICT (item_id) DO NOTHING",
        {"i": item_id, "d": digest_id, "p": Json(payload), "s": send_sequence},
    )


async def close_digest(conn: Conn, digest_id: uuid.UUID) -> Row | None:
    """Lock and mark the digest flushed; None when it was flushed already (a re-run)."""
    return await conn.fetch_one(
        "UPDATE notification_digests SET flushed_at = now()"
        " WHERE id = %(d)s AND flushed_at IS NULL"
        " RETURNING id, user_id, account_id, event_type, channels",
        {"d": digest_id},
    )


async def digest_items(conn: Conn, digest_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        # Send order: the sends' sequence, not the order their jobs happened to run in.
        "SELECT payload FROM notification_digest_items WHERE digest_id = %(d)s"
        " ORDER BY send_sequence NULLS LAST, created_at, item_id",
        {"d": digest_id},
    )


# -- account-level defaults (tenantd/notifications/preferences.py) -------------------------------


async def account_defaults(conn: Conn, *, account_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT event_type, channel, enabled FROM notification_account_defaults"
        " WHERE account_id = %(a)s",
        {"a": account_id},
    )


async def account_defaults_apply(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID) -> bool:
    """Whether one of the account's defaults decides a channel for the user (no own choice)."""
    return await exists(
        conn,
        "SELECT 1 FROM notification_account_defaults ad"
        " WHERE ad.account_id = %(a)s AND NOT EXISTS (SELECT 1 FROM notification_preferences p"
        "  WHERE p.user_id = %(u)s AND p.event_type = ad.event_type AND p.channel = ad.channel)",
        {"a": account_id, "u": user_id},
    )


async def set_account_default(
    conn: Conn, *, account_id: uuid.UUID, event_type: str, channel: str, enabled: bool | None
) -> None:
    """Set the account's default for one event type x channel; None removes it."""
    if enabled is None:
        await conn.execute(
            "DELETE FROM notification_account_defaults WHERE account_id = %(a)s"
            " AND event_type = %(t)s AND channel = %(c)s",
            {"a": account_id, "t": event_type, "c": channel},
        )
        return
    await conn.execute(
        "INSERT INTO notification_account_defaults (account_id, event_type, channel, enabled)"
        " VALUES (%(a)s, %(t)s, %(c)s, %(on)s) ON CONFLICT (account_id, event_type, channel)"
        " DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now()",
        {"a": account_id, "t": event_type, "c": channel, "on": enabled},
    )


# -- quiet hours (tenantd/notifications/quiet.py) --------------------------------------------------


async def quiet_hours(conn: Conn, *, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one(
        "SELECT time_zone, quiet_hours_start, quiet_hours_end, locale FROM users WHERE id = %(u)s",
        {"u": user_id},
    )


async def user_locale(conn: Conn, *, user_id: uuid.UUID) -> str | None:
    locale: str | None = await conn.fetch_val(
        "SELECT locale FROM users WHERE id = %(u)s", {"u": user_id}
    )
    return locale


# --- declarative event types (sql/0280) ---------------------------------------------------


async def event_definition_versions(conn: Conn) -> list[Row]:
    """Every stored event type with its version, in the order they were first defined."""
    return await conn.fetch_all(
        "SELECT type, version FROM event_definitions ORDER BY created_at, type"
    )


async def event_definitions(conn: Conn, *, types: list[str]) -> list[Row]:
    return await conn.fetch_all(
        "SELECT type, version, definition FROM event_definitions WHERE type = ANY(%(t)s)",
        {"t": types},
    )


async def put_event_definition(conn: Conn, *, event_type: str, definition: dict[str, Any]) -> Row:
    """Create or replace; the row's new version and whether it was created."""
    return await fetch_row(
        conn,
        "INSERT INTO event_definitions (type, definition) VALUES (%(t)s, %(d)s)"
        " ON CONFLICT (type) DO UPDATE SET definition = EXCLUDED.definition,"
        " version = nextval('event_definitions_version_seq'), updated_at = now()"
        " RETURNING version, (xmax = 0) AS created",
        {"t": event_type, "d": Json(definition)},
    )


async def delete_event_definition(conn: Conn, *, event_type: str) -> bool:
    deleted = await conn.execute(
        "DELETE FROM event_definitions WHERE type = %(t)s", {"t": event_type}
    )
    return deleted > 0
