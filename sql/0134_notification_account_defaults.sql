-- Account-level notification defaults (issue 18): an owner or admin sets the default of an
-- event type x channel for everyone in the account; a user's own preference overrides it.
-- They apply to notifications sent with that account_id.
CREATE TABLE notification_account_defaults (
    account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    channel     text NOT NULL CHECK (channel IN ('in_app', 'email', 'sse', 'web_push')),
    enabled     boolean NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, event_type, channel)
);
