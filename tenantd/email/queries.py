"""Statements of the email package: the suppression list and webhook event ids."""

from __future__ import annotations

# --- email_suppressions (tenantd/email/suppression.py) ----------------------------------

SUPPRESSION_FIND = (
    "SELECT email, reason, provider, details, created_at FROM email_suppressions"
    " WHERE email = %(email)s"
)

SUPPRESSION_ADD = (
    "INSERT INTO email_suppressions (email, reason, provider, details)"
    " VALUES (%(email)s, %(reason)s, %(provider)s, %(details)s)"
    " ON CONFLICT (email) DO NOTHING"
)

SUPPRESSION_ADD_MANY = (
    "INSERT INTO email_suppressions (email, reason, provider, details)"
    " SELECT e, r, %(provider)s, d::jsonb"
    " FROM unnest(%(emails)s::text[], %(reasons)s::text[], %(details)s::text[]) AS t(e, r, d)"
    " ON CONFLICT (email) DO NOTHING RETURNING email, reason"
)

SUPPRESSION_REMOVE = "DELETE FROM email_suppressions WHERE email = %(email)s"

SUPPRESSION_LIST = (
    "SELECT email, reason, provider, created_at FROM email_suppressions"
    " WHERE (%(provider)s::text IS NULL OR provider = %(provider)s)"
    "   AND (%(reason)s::text IS NULL OR reason = %(reason)s)"
    " ORDER BY created_at DESC, email LIMIT %(limit)s"
)

# --- webhook_events (tenantd/email/webhooks/ingest.py) ---------------------------------

# Insert a delivery's event ids; RETURNING gives those not seen before.
CLAIM_EVENT_IDS = (
    "INSERT INTO webhook_events (provider, event_id)"
    " SELECT %(provider)s, unnest(%(ids)s::text[])"
    " ON CONFLICT DO NOTHING RETURNING event_id"
)
