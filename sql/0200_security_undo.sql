-- "This wasn't me" (issue 25): every sensitive action leaves one row here, mailed to the user
-- as a link whose token is HMAC(SECRET_KEY, 'security-undo:' || id) (only its keyed hash is
-- kept, so neither the table nor the job queue holds a usable link). The link undoes the
-- action (what `data` needs to undo it) and ends every session of the user, once.
CREATE TABLE security_undo (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    action      text NOT NULL,
    -- the address the notice goes to, read when the action happened (a deleted user's
    -- address is released at once)
    notify_to   text NOT NULL,
    data        jsonb NOT NULL DEFAULT '{}',
    token_hash  bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX security_undo_user_idx ON security_undo (user_id, created_at);
CREATE INDEX security_undo_expires_idx ON security_undo (expires_at);
