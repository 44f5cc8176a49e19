-- The statement triggers that announce "this table changed" (signing_keys: tenantd_keys,
-- sql/0100; event_definitions: tenantd_event_types, sql/0280) share one trigger function
-- that takes its channel as the trigger's argument. It is defined here, not in
-- sql/functions/: a trigger needs its function when it is created, and sql/functions/ is
-- applied after the migrations. The triggers keep their names and events; each is replaced
-- in this transaction, so no change goes unannounced.
CREATE FUNCTION tenantd_announce_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_announce(TG_ARGV[0], '');
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER signing_keys_changed AFTER INSERT OR UPDATE OR DELETE ON signing_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_announce_changed('tenantd_keys');
CREATE OR REPLACE TRIGGER event_definitions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON event_definitions
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_announce_changed('tenantd_event_types');

DROP FUNCTION tenantd_keys_changed();
DROP FUNCTION tenantd_event_definitions_changed();
