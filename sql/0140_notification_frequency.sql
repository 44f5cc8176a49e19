-- Per-user frequency (issue 18): for an event that declares a digest, each user chooses per
-- event type x channel `instant`, `hourly` or `daily` (no row: the event's own digest window).
-- A digest remembers the channels it delivers to (NULL: all the event's channels).
CREATE TABLE notification_frequencies (
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    channel     text NOT NULL CHECK (channel IN ('in_app', 'email', 'sse', 'web_push')),
    frequency   text NOT NULL CHECK (frequency IN ('instant', 'hourly', 'daily')),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, event_type, channel)
);

ALTER TABLE notification_digests ADD COLUMN channels text[];
