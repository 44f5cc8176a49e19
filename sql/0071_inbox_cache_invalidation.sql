-- Invalidation of the cached inbox (first page and unread count) of a user: every insert,
-- update or delete of notifications announces `inbox:<user id>` once per statement and user
-- (statement-level triggers with transition tables, so a batch costs one announcement each).

CREATE FUNCTION tenantd_cache_inbox_new() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    uid uuid;
BEGIN
    FOR uid IN SELECT DISTINCT user_id FROM new_rows LOOP
        PERFORM tenantd_cache_announce('inbox', uid);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION tenantd_cache_inbox_old() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    uid uuid;
BEGIN
    FOR uid IN SELECT DISTINCT user_id FROM old_rows LOOP
        PERFORM tenantd_cache_announce('inbox', uid);
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER notifications_inbox_cache_insert AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_cache_inbox_new();
CREATE TRIGGER notifications_inbox_cache_update AFTER UPDATE ON notifications
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_cache_inbox_new();
CREATE TRIGGER notifications_inbox_cache_delete AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_cache_inbox_old();
