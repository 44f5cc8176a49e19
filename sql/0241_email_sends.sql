-- Sent-markers of keyed emails (issue 26): for providers that take no idempotency key
-- (Postmark, SendGrid, SMTP), a mail job's key is written `sending` (committed) before the
-- provider call and `sent` after its answer; a job run again after a crash finds `sent` and
-- does not mail twice. Only a call whose answer was never recorded (in flight at the crash)
-- can be sent again. Rows are swept after EMAIL_SENDS_RETENTION (tenantd/email/sweeps.py).
CREATE TABLE email_sends (
    key         text PRIMARY KEY,
    provider    text NOT NULL,
    state       text NOT NULL DEFAULT 'sending' CHECK (state IN ('sending', 'sent')),
    attempts    int NOT NULL DEFAULT 1,
    message_id  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz
);
CREATE INDEX email_sends_created_idx ON email_sends (created_at);
