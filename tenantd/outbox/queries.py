"""Statements of the outbox; each takes the connection it is given (hot paths hand-written)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from tenantd.db.core import Prepared
from tenantd.db.tables import outbox_events
from tenantd.ops.queries import Purge

# One row per event, in the caller's transaction (prepared: it rides on every mutation).
INSERT_EVENT = Prepared(
    "outbox_insert_event",
    "INSERT INTO outbox_events"
    " (event_id, type, account_id, subject, actor_type, actor_id, data, previous)"
    " VALUES (%(event_id)s::text, %(type)s::text, %(account_id)s::uuid, %(subject)s::text,"
    " %(actor_type)s::text, %(actor_id)s::text, %(data)s::jsonb, %(previous)s::jsonb)",
)

INSERT_EVENTS = """
INSERT INTO outbox_events
    (event_id, type, account_id, subject, actor_type, actor_id, data, previous)
SELECT * FROM unnest(%(event_ids)s::text[], %(types)s::text[], %(account_ids)s::uuid[],
                     %(subjects)s::text[], %(actor_types)s::text[], %(actor_ids)s::text[],
                     %(data)s::jsonb[], %(previous)s::jsonb[])
"""

# The sequencer's turn: whoever holds the one outbox_sequencer row (SKIP LOCKED: the others
# skip this round) numbers the committed, unnumbered rows in id order after the last number
# it handed out. Rows of transactions still in flight are invisible here and get later
# numbers once they commit, so a reader's cursor never passes a row that appears later.
LOCK_SEQUENCER = "SELECT last_seq FROM outbox_sequencer WHERE id = 1 FOR UPDATE SKIP LOCKED"
# Nonzero while the row exists: LOCK_SEQUENCER found nothing because another sequencer holds it.
SEQUENCER_ROWS = "SELECT count(*) FROM outbox_sequencer"

# The row is seeded by the migration; this puts it back if it went (a TRUNCATE), after the
# highest number handed out so far.
SEED_SEQUENCER = """
INSERT INTO outbox_sequencer (id, last_seq)
SELECT 1, coalesce(max(seq), 0) FROM outbox_events
ON CONFLICT (id) DO NOTHING
"""

# The rows are picked by the partial index of unnumbered rows and then reached by primary
# key only (= ANY of an array computed once): a plan driven by stale statistics (the table
# looked empty at the last analyze) cannot turn this into a join that rescans the backlog
# once per row (seconds per batch with a backlog of thousands).
SEQUENCE = """
WITH pick AS MATERIALIZED (
    SELECT ARRAY(SELECT id FROM outbox_events WHERE seq IS NULL ORDER BY id
                 LIMIT %(limit)s::int) AS ids
)
UPDATE outbox_events e
   SET seq = %(last)s::bigint + p.n
  FROM pick, unnest(pick.ids) WITH ORDINALITY AS p(id, n)
 WHERE e.id = ANY(pick.ids) AND e.id = p.id
RETURNING e.id, e.seq, e.event_id, e.type, e.account_id, e.subject, e.actor_type,
          e.actor_id, e.data, e.previous, e.occurred_at
"""

SAVE_SEQUENCER = "UPDATE outbox_sequencer SET last_seq = %(last)s::bigint WHERE id = 1"

EVENT_COLUMNS = (
    "id, seq, event_id, type, account_id, subject, actor_type, actor_id, data, previous,"
    " occurred_at"
)

READ_EVENTS = f"""
SELECT {EVENT_COLUMNS} FROM outbox_events
 WHERE seq > %(after)s::bigint AND type NOT LIKE 'webhook.%%'
   AND (%(types)s::text[] IS NULL OR type = ANY(%(types)s::text[]))
 ORDER BY seq
 LIMIT %(limit)s::int
"""

EVENTS_SINCE = f"""
SELECT {EVENT_COLUMNS} FROM outbox_events
 WHERE seq IS NOT NULL AND occurred_at >= %(since)s::timestamptz
 ORDER BY seq
"""

LAST_POSITION = "SELECT last_seq FROM outbox_sequencer WHERE id = 1"
BACKLOG = "SELECT count(*) FROM outbox_events WHERE seq IS NULL"
# An idle relay's poll: one probe of the partial index of unnumbered rows.
ANY_UNNUMBERED = "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE seq IS NULL)"


def older_than(days: float) -> Purge:
    """Numbered events that occurred more than `days` ago (the retention sweep)."""
    return outbox_events, sa.and_(
        outbox_events.c.seq.is_not(None),
        outbox_events.c.occurred_at < sa.func.now() - timedelta(days=days),
    )
