-- Issue 18, second round.
-- Throttle counters expire: a row is only needed until its window ends, after which the
-- `throttles` sweep deletes it (a later send starts a new window anyway).
ALTER TABLE notification_throttles ADD COLUMN expires_at timestamptz;
-- Rows counted before this migration did not store their window's length: give them a day,
-- which covers the hourly and daily windows the throttles declare in practice.
UPDATE notification_throttles SET expires_at = window_start + interval '1 day';
ALTER TABLE notification_throttles ALTER COLUMN expires_at SET NOT NULL;
CREATE INDEX notification_throttles_expires_idx ON notification_throttles (expires_at);

-- A digest lists its items in the order they were sent, not the order their dispatch jobs
-- ran: each item keeps the send's sequence (the id of the dispatch job the send wrote).
ALTER TABLE notification_digest_items ADD COLUMN send_sequence bigint;
