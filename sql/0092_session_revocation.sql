-- Ending a session family (logout, reuse of a rotated-out refresh token, logout-all) ends
-- every access token issued to it: tokens carry the family as `sid`, the guard refuses a sid
-- whose family has a revoked row, and the context caches drop that session's tokens at once
-- (same process: NOTICE; other instances: NOTIFY) through the 0070 announce function.
-- Payload: session:<family uuid>.

CREATE FUNCTION tenantd_cache_sessions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce('session', NEW.family_id);
    RETURN NULL;
END $$;

CREATE TRIGGER sessions_cache AFTER UPDATE OF revoked_at ON sessions
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION tenantd_cache_sessions();
