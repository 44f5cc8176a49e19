-- Sessions users can see and end (issue 14). A session is a refresh family; its live row
-- describes it: the sign-in time and method are copied forward on every rotation, and the
-- row's own created_at, ip and user_agent are those of the last refresh (its last use).
ALTER TABLE sessions ADD COLUMN signed_in_at timestamptz;
ALTER TABLE sessions ADD COLUMN method text;

-- Browsers a user has signed in from: a `device_id` cookie (random, stored only as a keyed
-- hash). A sign-in from a browser not listed here for the user sends a "new sign-in" mail.
CREATE TABLE known_devices (
    user_id        uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    device_hash    bytea NOT NULL,
    browser        text,
    os             text,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, device_hash)
);
CREATE INDEX known_devices_seen_idx ON known_devices (last_seen_at);
