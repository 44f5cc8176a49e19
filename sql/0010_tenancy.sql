-- tenancy: an invariant the invitation service also keeps under the account lock.

-- At most one pending invitation per (account, address); resend rotates its token instead.
CREATE UNIQUE INDEX invitations_pending_email_key
    ON invitations (account_id, lower(email))
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
