-- Change of a user's email address (issue 18): the new address confirms with a link, the old
-- one gets a notice with a "this wasn't me" link that cancels (or undoes) it and ends sessions.
-- Only keyed hashes of both link tokens are stored.
CREATE TABLE email_changes (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    old_email     text NOT NULL,
    new_email     text NOT NULL,
    confirm_hash  bytea NOT NULL,
    cancel_hash   bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    cancel_until  timestamptz NOT NULL,
    confirmed_at  timestamptz,
    cancelled_at  timestamptz
);
CREATE UNIQUE INDEX email_changes_confirm_key ON email_changes (confirm_hash);
CREATE UNIQUE INDEX email_changes_cancel_key ON email_changes (cancel_hash);
CREATE INDEX email_changes_user_idx ON email_changes (user_id);
