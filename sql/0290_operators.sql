-- Operators (issue 28 part 4): disabled users, last sign-in, impersonation links, user search.

ALTER TABLE users ADD COLUMN disabled_at timestamptz;
ALTER TABLE users ADD COLUMN last_sign_in_at timestamptz;

-- An impersonation session names its operator (the `act` claim of its access tokens).
ALTER TABLE session_auth ADD COLUMN act text;

-- One-time impersonation links: only the keyed hash of the token is stored.
CREATE TABLE impersonation_links (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash  bytea NOT NULL UNIQUE,
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    actor       text NOT NULL,
    reason      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    family_id   uuid,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX impersonation_links_user_idx ON impersonation_links (user_id);

-- The admin list: newest first, keyset pagination; search by substring (trigrams) of
-- email and names, and by email prefix for queries too short for trigrams.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX users_created_idx ON users (created_at DESC, id DESC);
CREATE INDEX users_email_prefix_idx ON users (lower(email) text_pattern_ops);
CREATE INDEX users_search_trgm_idx ON users
    USING gin ((lower(email || ' ' || first_name || ' ' || last_name)) gin_trgm_ops);
