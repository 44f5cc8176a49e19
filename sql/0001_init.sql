-- tenantd schema, part 1: identity, tenancy, plans, audit, suppression, jobs, notifications.

CREATE EXTENSION IF NOT EXISTS pgcrypto;

CREATE TABLE users (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email               text NOT NULL,
    first_name          text NOT NULL DEFAULT '',
    last_name           text NOT NULL DEFAULT '',
    email_verified_at   timestamptz,
    -- user-wide cutoff: access tokens issued before it are refused (logout-all, password reset)
    tokens_valid_after  timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

-- Auth providers: the password-hash provider...
CREATE TABLE user_passwords (
    user_id        uuid PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    password_hash  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- ...and OAuth / OpenID Connect identities.
CREATE TABLE user_identities (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    provider    text NOT NULL,
    subject     text NOT NULL,
    email       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, subject),
    UNIQUE (user_id, provider)
);

-- Single-use tokens sent by email (verification, password reset); only hashes are stored.
CREATE TABLE user_tokens (
    token_hash  bytea PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    purpose     text NOT NULL CHECK (purpose IN ('verify_email', 'password_reset')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX user_tokens_user_idx ON user_tokens (user_id, purpose);
CREATE INDEX user_tokens_expires_idx ON user_tokens (expires_at);

CREATE TABLE accounts (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL,
    claimed_domain  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz
);
-- Two live accounts never share a claim; a soft-deleted account releases it.
CREATE UNIQUE INDEX accounts_claimed_domain_live_key
    ON accounts (lower(claimed_domain))
    WHERE claimed_domain IS NOT NULL AND deleted_at IS NULL;
CREATE INDEX accounts_deleted_at_idx ON accounts (deleted_at) WHERE deleted_at IS NOT NULL;

-- Refresh sessions: one row per issued refresh token; rotation links rows in a family.
CREATE TABLE sessions (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    family_id    uuid NOT NULL,
    user_id      uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    -- the aid account; a hard-deleted account takes its sessions with it
    account_id   uuid REFERENCES accounts(id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    rotated_at   timestamptz,
    revoked_at   timestamptz,
    access_jti   uuid,
    user_agent   text,
    ip           text
);
CREATE INDEX sessions_user_idx ON sessions (user_id);
CREATE INDEX sessions_family_idx ON sessions (family_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

-- Revoked access-token identifiers (logout); rows are useless after expires_at.
CREATE TABLE revoked_tokens (
    jti         uuid PRIMARY KEY,
    user_id     uuid NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX revoked_tokens_expires_idx ON revoked_tokens (expires_at);

CREATE TABLE memberships (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
-- Invariant 1: at most one active membership per (account, user).
CREATE UNIQUE INDEX memberships_active_key
    ON memberships (account_id, user_id) WHERE revoked_at IS NULL;
-- Invariant 2: at most one active owner per account.
CREATE UNIQUE INDEX memberships_one_owner_key
    ON memberships (account_id) WHERE role = 'owner' AND revoked_at IS NULL;
CREATE INDEX memberships_user_idx ON memberships (user_id) WHERE revoked_at IS NULL;

CREATE TABLE plans (
    code      text PRIMARY KEY,
    name      text NOT NULL,
    seats     integer NOT NULL CHECK (seats >= 0),
    features  text[] NOT NULL DEFAULT '{}'
);
INSERT INTO plans (code, name, seats, features) VALUES
    ('free', 'Free', 1, '{}'),
    ('team', 'Team', 10, '{team_invitations}'),
    ('business', 'Business', 100, '{team_invitations}');

CREATE TABLE account_plans (
    account_id  uuid PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
    plan_code   text NOT NULL REFERENCES plans(code),
    seats       integer CHECK (seats >= 0),  -- NULL: the plan's seat count
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE account_feature_overrides (
    account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    feature     text NOT NULL,
    enabled     boolean NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, feature)
);

CREATE TABLE invitations (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id   uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    email        text NOT NULL,
    role         text NOT NULL CHECK (role IN ('admin', 'member')),
    token_hash   bytea NOT NULL UNIQUE,
    invited_by   uuid REFERENCES users(id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    resent_at    timestamptz,
    accepted_at  timestamptz,
    accepted_by  uuid REFERENCES users(id) ON DELETE SET NULL,
    revoked_at   timestamptz
);
CREATE INDEX invitations_account_idx ON invitations (account_id);
CREATE INDEX invitations_pending_expiry_idx ON invitations (expires_at)
    WHERE accepted_at IS NULL AND revoked_at IS NULL;

CREATE TABLE join_requests (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    domain      text NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    decided_by  uuid REFERENCES users(id) ON DELETE SET NULL
);
CREATE UNIQUE INDEX join_requests_pending_key
    ON join_requests (account_id, user_id) WHERE status = 'pending';

-- No foreign key on account_id: audit rows survive the hard delete.
CREATE TABLE audit_log (
    id             bigserial PRIMARY KEY,
    account_id     uuid,
    actor_user_id  uuid,
    action         text NOT NULL,
    target         text,
    data           jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_account_idx ON audit_log (account_id, created_at);

CREATE TABLE email_suppressions (
    email       text PRIMARY KEY,  -- normalised: trimmed, domain lower-cased
    reason      text NOT NULL,
    provider    text NOT NULL,
    details     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_suppressions_provider_idx ON email_suppressions (provider, reason);

-- Provider event ids already applied (svix-id, sg_event_id): a retried delivery is a no-op.
CREATE TABLE webhook_events (
    provider     text NOT NULL,
    event_id     text NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX webhook_events_received_idx ON webhook_events (received_at);

-- Durable job queue, claimed with FOR UPDATE SKIP LOCKED and a lease.
CREATE TABLE jobs (
    id            bigserial PRIMARY KEY,
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    status        text NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 8,
    run_at        timestamptz NOT NULL DEFAULT now(),
    locked_until  timestamptz,
    locked_by     text,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status = 'queued';
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'running';
CREATE INDEX jobs_finished_idx ON jobs (finished_at) WHERE status IN ('done', 'failed');

CREATE TABLE notifications (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    account_id  uuid REFERENCES accounts(id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    title       text NOT NULL,
    body        text NOT NULL DEFAULT '',
    cta_url     text NOT NULL DEFAULT '',
    cta_label   text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'unread' CHECK (status IN ('unread', 'read')),
    read_at     timestamptz,
    payload     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notifications_user_created_idx ON notifications (user_id, created_at DESC, id DESC);
CREATE INDEX notifications_user_unread_idx ON notifications (user_id, created_at DESC, id DESC)
    WHERE status = 'unread';
CREATE INDEX notifications_account_idx ON notifications (account_id) WHERE account_id IS NOT NULL;

CREATE TABLE notification_deliveries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    notification_id  uuid NOT NULL REFERENCES notifications(id) ON DELETE CASCADE,
    channel          text NOT NULL CHECK (channel IN ('in_app', 'email', 'sse', 'web_push')),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'sent', 'failed', 'suppressed')),
    reason           text,
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (notification_id, channel)
);

CREATE TABLE notification_dedup (
    dedup_key   text PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_dedup_expires_idx ON notification_dedup (expires_at);

CREATE TABLE notification_preferences (
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    channel     text NOT NULL CHECK (channel IN ('in_app', 'email', 'sse', 'web_push')),
    enabled     boolean NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, event_type, channel)
);

CREATE TABLE push_subscriptions (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    endpoint      text NOT NULL,
    p256dh_key    text NOT NULL,
    auth_key      text NOT NULL,
    user_agent    text,
    expires_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    UNIQUE (user_id, endpoint)
);

-- Fixed-window counters for abuse limits, shared by every instance.
CREATE TABLE rate_limits (
    key           text PRIMARY KEY,
    window_start  timestamptz NOT NULL,
    count         integer NOT NULL
);
