-- Server API keys (issue 15): `Authorization: Bearer tdk_<id>_<secret>` on server routes.
-- Only an HMAC-SHA256 of the whole token (keyed by SECRET_KEY) is stored; the token is
-- shown once by `tenantd api-keys create`. Revocation is a soft delete (revoked_at).
CREATE TABLE api_keys (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name          text NOT NULL,
    scopes        text[] NOT NULL,
    secret_hash   bytea NOT NULL,
    created_by    text,              -- who made it (the operator's login for the CLI)
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,       -- refreshed at most once a minute per instance
    revoked_at    timestamptz
);

-- Every instance caches verified keys; a revocation (or a change of scopes or secret, or a
-- delete) announces `apikey:<id>` on the context-cache channel (sql/0070), so the revoking
-- process drops it at once (NOTICE) and every other one on commit (NOTIFY). last_used_at
-- updates announce nothing.
CREATE FUNCTION tenantd_cache_api_keys() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM tenantd_cache_announce('apikey', OLD.id);
    ELSE
        PERFORM tenantd_cache_announce('apikey', NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_cache_update AFTER UPDATE ON api_keys
    FOR EACH ROW
    WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at
          OR OLD.scopes IS DISTINCT FROM NEW.scopes
          OR OLD.secret_hash IS DISTINCT FROM NEW.secret_hash)
    EXECUTE FUNCTION tenantd_cache_api_keys();
CREATE TRIGGER api_keys_cache_delete AFTER DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION tenantd_cache_api_keys();
