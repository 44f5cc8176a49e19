-- Issue 25, item 12: a verification link carries the names of its own sign-up. Verifying with
-- it sets them on the user, so whoever signed up first with someone else's address (a
-- squatter) leaves no name on the owner's account nor in the mail sent to the owner.
-- NULL on links that are not a sign-up's (and on links made before this migration).
ALTER TABLE user_tokens ADD COLUMN first_name text, ADD COLUMN last_name text;
