-- Delete my user (issue 18). At deletion the address is released at once (users.email becomes
-- a tombstone, the real address waits in deleted_email), credentials and sessions end; after
-- the grace window the `users` sweep anonymises the row (names and deleted_email cleared).
ALTER TABLE users ADD COLUMN deleted_at timestamptz;
ALTER TABLE users ADD COLUMN deleted_email text;
ALTER TABLE users ADD COLUMN anonymized_at timestamptz;
CREATE INDEX users_deleted_idx ON users (deleted_at)
    WHERE deleted_at IS NOT NULL AND anonymized_at IS NULL;
