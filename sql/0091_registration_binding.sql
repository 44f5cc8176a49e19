-- Registration binding. Each sign-up keeps its own pending credential on its verification
-- link: the password it chose (password_hash, 0040) and the keyed hash of the binding cookie
-- handed to the browser that registered. The link installs that password only in that browser
-- (or with the password itself), so whoever registers an address they do not own never gets
-- a password onto the account the mailbox owner lands in.
ALTER TABLE user_tokens ADD COLUMN binding_hash bytea;

-- Until now the first sign-up's password sat on the user row before anyone had proved the
-- mailbox. Move such unproven passwords onto the links that relied on them (NULL password:
-- "the user row's applies"); without a binding they install only with {token, password}.
-- A row updated after it was made was set by a password reset, which proved the mailbox: kept.
UPDATE user_tokens t
   SET password_hash = p.password_hash
  FROM users u
  JOIN user_passwords p ON p.user_id = u.id
 WHERE t.user_id = u.id
   AND t.purpose = 'verify_email'
   AND t.password_hash IS NULL
   AND u.email_verified_at IS NULL
   AND p.updated_at = p.created_at;

DELETE FROM user_passwords p
 USING users u
 WHERE u.id = p.user_id
   AND u.email_verified_at IS NULL
   AND p.updated_at = p.created_at;
