-- A sign-in writes users.last_sign_in_at (sql/0290) on every session it starts. No cached
-- fact depends on it (the admin API reads it from the table), so an update that changes only
-- that column does not announce `user:` to the context cache: otherwise every sign-in would
-- drop the user's cached token facts, principals, /me bodies and inbox answers, and a new
-- token of a known user would need the token-state statement again.

CREATE OR REPLACE FUNCTION tenantd_cache_users() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND to_jsonb(OLD) - 'last_sign_in_at' = to_jsonb(NEW) - 'last_sign_in_at' THEN
        RETURN NULL;
    END IF;
    PERFORM tenantd_cache_announce('user', OLD.id);
    RETURN NULL;
END $$;
