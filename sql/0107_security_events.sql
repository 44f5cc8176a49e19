-- Per-user security events (issue 14): sign-ins and sign-outs, password changes, ended
-- sessions, refresh-token reuse, OAuth links. Written in the transaction of the event.
CREATE TABLE security_events (
    id          bigserial PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    type        text NOT NULL,
    session_id  uuid,
    ip          text,
    user_agent  text,
    data        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX security_events_user_idx ON security_events (user_id, id);
