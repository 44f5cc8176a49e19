-- A verification link carries the password chosen by the registration that sent it, so a
-- later sign-up by the mailbox owner replaces a password an earlier (hostile) sign-up chose.
ALTER TABLE user_tokens ADD COLUMN password_hash text;
