"""Statements of the suppression package: the list and the provider event ids seen."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db import tables
from tenantd.db.core import Prepared
from tenantd.ops.queries import Purge

# --- email_suppressions (tenantd/suppression/service.py) ----------------------------------

SUPPRESSION_FIND = (
    "SELECT email, reason, provider, details, created_at FROM email_suppressions"
    " WHERE email = %(email)s"
)

SUPPRESSION_ADD = (
    "INSERT INTO email_suppressions (email, reason, provider, details)"
    " VALUES (%(email)s, %(reason)s, %(provider)s, %(details)s)"
    " ON CONFLICT (email) DO NOTHING"
)

# A batch of verdicts in one statement. The rows travel as one JSON document and the answer
# as two arrays: psycopg2 quoted every element of the three text[] parameters one by one and
# the reply built a dict per inserted row, a per-address cost that outweighed the insert.
# Rows are inserted in the order given (sorted by the caller) so concurrent batches lock keys
# in the same order.
SUPPRESSION_ADD_MANY = Prepared(
    "email_suppression_add_many",
    "WITH added AS ("
    " INSERT INTO email_suppressions (email, reason, provider, details)"
    " SELECT r.email, r.reason, %(provider)s::text, r.details"
    " FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(email text, reason text, details jsonb)"
    " ON CONFLICT (email) DO NOTHING RETURNING email, reason)"
    " SELECT coalesce(array_agg(email ORDER BY email), '{}') AS emails,"
    " coalesce(array_agg(reason ORDER BY email), '{}') AS reasons FROM added",
)

SUPPRESSION_REMOVE = "DELETE FROM email_suppressions WHERE email = %(email)s"

SUPPRESSION_LIST = (
    "SELECT email, reason, provider, created_at FROM email_suppressions"
    " WHERE (%(provider)s::text IS NULL OR provider = %(provider)s)"
    "   AND (%(reason)s::text IS NULL OR reason = %(reason)s)"
    " ORDER BY created_at DESC, email LIMIT %(limit)s"
)

# --- webhook_events (tenantd/suppression/webhooks/ingest.py) ---------------------------------

# Insert a delivery's event ids (one JSON array, in the order given); the answer is the array
# of those not seen before.
CLAIM_EVENT_IDS = Prepared(
    "email_claim_event_ids",
    "WITH claimed AS ("
    " INSERT INTO webhook_events (provider, event_id)"
    " SELECT %(provider)s::text, id FROM jsonb_array_elements_text(%(ids)s::jsonb) AS t(id)"
    " ON CONFLICT DO NOTHING RETURNING event_id)"
    " SELECT coalesce(array_agg(event_id), '{}') FROM claimed",
)


def event_ids_older_than(age: timedelta) -> Purge:
    """Provider event ids received more than `age` ago (the session sweep's part)."""
    return tables.webhook_events, tables.webhook_events.c.received_at < func.now() - age
