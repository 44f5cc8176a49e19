-- Invalidation of the in-process request-context cache (user, membership, account, features,
-- revocation state). Every write that changes a cached fact announces it:
--   pg_notify('tenantd_cache', ...)  reaches every instance's listener after commit;
--   RAISE NOTICE 'tenantd_cache:...' reaches the writing process itself at once, so the
--   instance that made the change refuses a revoked token on the very next request.
-- Payloads: user:<uuid>, account:<uuid>, jti:<uuid>.

CREATE FUNCTION tenantd_cache_announce(kind text, id uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF id IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_notify('tenantd_cache', kind || ':' || id::text);
    RAISE NOTICE 'tenantd_cache:%:%', kind, id;
END $$;

CREATE FUNCTION tenantd_cache_user_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM tenantd_cache_announce('user', OLD.user_id);
        RETURN OLD;
    END IF;
    PERFORM tenantd_cache_announce('user', NEW.user_id);
    IF TG_OP = 'UPDATE' AND OLD.user_id IS DISTINCT FROM NEW.user_id THEN
        PERFORM tenantd_cache_announce('user', OLD.user_id);
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION tenantd_cache_users() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce('user', OLD.id);
    RETURN NULL;
END $$;

CREATE FUNCTION tenantd_cache_account_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM tenantd_cache_announce('account', OLD.account_id);
        RETURN OLD;
    END IF;
    PERFORM tenantd_cache_announce('account', NEW.account_id);
    RETURN NEW;
END $$;

CREATE FUNCTION tenantd_cache_accounts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce('account', OLD.id);
    RETURN NULL;
END $$;

CREATE FUNCTION tenantd_cache_revoked_tokens() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce('jti', NEW.jti);
    RETURN NULL;
END $$;

CREATE FUNCTION tenantd_cache_plans() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenantd_cache', 'all');
    RAISE NOTICE 'tenantd_cache:all';
    RETURN NULL;
END $$;

CREATE TRIGGER users_cache AFTER UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_users();
CREATE TRIGGER memberships_cache AFTER INSERT OR UPDATE OR DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_user_row();
CREATE TRIGGER user_passwords_cache AFTER INSERT OR UPDATE OR DELETE ON user_passwords
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_user_row();
CREATE TRIGGER user_identities_cache AFTER INSERT OR UPDATE OR DELETE ON user_identities
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_user_row();
CREATE TRIGGER accounts_cache AFTER UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_accounts();
CREATE TRIGGER account_plans_cache AFTER INSERT OR UPDATE OR DELETE ON account_plans
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_account_row();
CREATE TRIGGER account_feature_overrides_cache
    AFTER INSERT OR UPDATE OR DELETE ON account_feature_overrides
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_account_row();
CREATE TRIGGER revoked_tokens_cache AFTER INSERT ON revoked_tokens
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_revoked_tokens();
CREATE TRIGGER plans_cache AFTER UPDATE OR DELETE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_cache_plans();
