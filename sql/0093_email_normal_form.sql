-- Email addresses compare in one normalised form (tenantd/email/addresses.py): lower-cased,
-- IDNA (punycode) domain, no trailing dot. Rows written before kept the local part's case
-- and could end in a dot, so `Dave@x` and `dave@x` were two suppression rows.
--
-- The fold here is lower() and trailing dots only: PostgreSQL has no IDNA, and the migration
-- runner applies SQL files only. Every address the service writes from now on is normalised
-- in Python first, so only rows written before this migration with a non-ASCII domain (an
-- internationalised domain kept in Unicode) are not folded; list them with
--   SELECT email FROM email_suppressions WHERE email !~ '^[[:ascii:]]*$';
-- re-add each one with `tenantd suppress add` (which normalises) and delete the old row, which
-- matches nothing now.

-- Suppression rows that fold to one address: the oldest one stays (its reason and provider
-- are the first verdict, as for any later insert), the others go.
DELETE FROM email_suppressions s
 USING (SELECT email,
               row_number() OVER (
                   PARTITION BY rtrim(lower(email), '.')
                   ORDER BY created_at, (email = rtrim(lower(email), '.')) DESC, email
               ) AS rank
          FROM email_suppressions) ranked
 WHERE s.email = ranked.email AND ranked.rank > 1;

UPDATE email_suppressions SET email = rtrim(lower(email), '.')
 WHERE email <> rtrim(lower(email), '.');

-- Users are already unique on lower(email); fold the rest of the form (a trailing dot came in
-- through OpenID Connect). Two users that fold to one address are left as they are: merging
-- accounts is an operator's decision, not a migration's.
UPDATE users u SET email = f.folded, updated_at = now()
  FROM (SELECT id, rtrim(lower(email), '.') AS folded,
               count(*) OVER (PARTITION BY rtrim(lower(email), '.')) AS sharing
          FROM users) f
 WHERE u.id = f.id AND f.sharing = 1 AND u.email <> f.folded;

-- Creating an account looks up the caller's pending join request (domain claiming).
CREATE INDEX IF NOT EXISTS join_requests_pending_user_idx
    ON join_requests (user_id) WHERE status = 'pending';
