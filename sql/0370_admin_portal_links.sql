-- The admin portal (issue 30 part 4): an owner's short-lived, single-use link that lets the
-- customer's IT configure the account's SSO connection (intent 'sso') or SCIM directory
-- (intent 'directory') on hosted pages. Only HMAC-SHA256 digests (keyed by SECRET_KEY) of the
-- link's token and of the portal session's token are kept, like every token tenantd issues.
-- Opening the link (opened_at) trades it for the session, bound to the account and intent.
CREATE TABLE admin_portal_links (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id          uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    intent              text NOT NULL CHECK (intent IN ('sso', 'directory')),
    token_hash          bytea NOT NULL,
    created_by          uuid REFERENCES users(id) ON DELETE SET NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    opened_at           timestamptz,
    session_hash        bytea,
    session_expires_at  timestamptz,
    CONSTRAINT admin_portal_links_token_hash_key UNIQUE (token_hash),
    CONSTRAINT admin_portal_links_session_hash_key UNIQUE (session_hash)
);
CREATE INDEX admin_portal_links_account_idx ON admin_portal_links (account_id, created_at);
