-- Sign-in by email (issue 29): one live code per address, sent with a magic link in the same
-- mail. Only keyed hashes of the 6-digit code and of the link token are stored; `attempts`
-- counts wrong codes (five end the code, the right one included). The address is kept (the
-- link must know whom it signs in) until the sessions sweep deletes the row a day after it
-- expired.
CREATE TABLE email_codes (
    email      text PRIMARY KEY,
    code_hash  bytea NOT NULL,
    link_hash  bytea NOT NULL,
    attempts   integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX email_codes_link_key ON email_codes (link_hash);
CREATE INDEX email_codes_expires_idx ON email_codes (expires_at);
