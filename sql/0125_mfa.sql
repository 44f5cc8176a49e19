-- Multi-factor authentication (issue 17): TOTP, recovery codes, passkeys, sign-in tickets,
-- the authentication a session carries (amr, auth_time) and the account policy.

-- Denormalised "has at least one factor" (TOTP confirmed or a passkey), kept by tenantd/mfa
-- under the user row lock; on users so the context cache's users trigger invalidates /me.
ALTER TABLE users ADD COLUMN mfa_enabled boolean NOT NULL DEFAULT false;
ALTER TABLE accounts ADD COLUMN require_mfa boolean NOT NULL DEFAULT false;

CREATE TABLE mfa_totp (
    user_id          uuid PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    -- AES-GCM(HKDF(SECRET_KEY)) nonce || ciphertext; the user id is the associated data
    secret_encrypted bytea NOT NULL,
    confirmed_at     timestamptz,
    -- the newest RFC 6238 time step accepted: a code of that step or before is a replay
    last_used_step   bigint,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- Wrong second-factor codes per user: 5 inside 15 minutes lock the codes for 15 minutes.
CREATE TABLE mfa_failures (
    user_id      uuid PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    failures     integer NOT NULL,
    locked_until timestamptz
);

CREATE TABLE mfa_recovery_codes (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    code_hash  bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    used_at    timestamptz
);
CREATE INDEX mfa_recovery_codes_user_idx ON mfa_recovery_codes (user_id);

-- A first factor passed, the second one pending: single use, 5 minutes, bound to a browser.
CREATE TABLE mfa_tickets (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash   bytea NOT NULL UNIQUE,
    binding_hash bytea NOT NULL,
    user_id      uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    amr          text[] NOT NULL,
    return_to    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX mfa_tickets_expires_idx ON mfa_tickets (expires_at);

-- How a session family signed in (RFC 8176 amr) and when it last proved it (auth_time):
-- every access token of the family carries them, across refreshes; reauth moves auth_time.
CREATE TABLE session_auth (
    family_id  uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    amr        text[] NOT NULL,
    auth_time  timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_auth_user_idx ON session_auth (user_id);

CREATE TABLE passkeys (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    credential_id bytea NOT NULL UNIQUE,
    public_key    bytea NOT NULL,
    sign_count    bigint NOT NULL DEFAULT 0,
    aaguid        text,
    transports    text[] NOT NULL DEFAULT '{}',
    name          text NOT NULL,
    backed_up     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz
);
CREATE INDEX passkeys_user_idx ON passkeys (user_id);

-- WebAuthn challenges handed out: single use, found by the hash of the challenge the
-- authenticator signed (clientDataJSON), for one purpose and (but for sign-in) one user.
CREATE TABLE webauthn_challenges (
    challenge_hash bytea PRIMARY KEY,
    purpose        text NOT NULL,
    user_id        uuid REFERENCES users(id) ON DELETE CASCADE,
    ticket_id      uuid REFERENCES mfa_tickets(id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL
);
CREATE INDEX webauthn_challenges_expires_idx ON webauthn_challenges (expires_at);
