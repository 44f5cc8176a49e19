"""Statements of the email package: the sent-markers of keyed messages."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db.core import Prepared
from tenantd.db.tables import email_sends
from tenantd.ops.queries import Purge

# --- email_sends (tenantd/email/service.py, sql/0241) -------------------------------------

# Before the provider call: the key's marker, written `sending` (or its earlier state).
SEND_MARK = Prepared(
    "email_send_mark",
    "INSERT INTO email_sends (key, provider) VALUES (%(key)s, %(provider)s)"
    " ON CONFLICT (key) DO UPDATE SET attempts = email_sends.attempts + 1"
    " RETURNING state, message_id",
)

# After the provider accepted the message.
SENT_MARK = Prepared(
    "email_sent_mark",
    "UPDATE email_sends SET state = 'sent', message_id = %(message_id)s, sent_at = now()"
    " WHERE key = %(key)s",
)


def sends_older_than(age: timedelta) -> Purge:
    """Sent-markers older than `age` (the email_sends sweep)."""
    return email_sends, email_sends.c.created_at < func.now() - age
