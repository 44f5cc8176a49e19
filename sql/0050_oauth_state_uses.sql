-- OAuth sign-in: each state cookie (by its jti) completes at most one callback, so a replayed
-- callback is refused here even before the provider sees the code again. Rows are useless once
-- the cookie itself has expired; the consuming statement deletes those as it goes.
CREATE TABLE oauth_state_uses (
    jti         uuid PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX oauth_state_uses_expires_idx ON oauth_state_uses (expires_at);
