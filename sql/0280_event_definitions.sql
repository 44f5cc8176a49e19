-- Declarative event types stored over HTTP (PUT /api/v1/notifications/event-types/{type}).
-- `definition` is the body as given (camelCase JSON). `version` comes from one sequence, so
-- a replaced or re-created type never reuses a number: instances compile each definition
-- once per version. Every change NOTIFYs tenantd_event_types so each instance reloads at
-- once (and every few seconds regardless).

CREATE SEQUENCE event_definitions_version_seq;

CREATE TABLE event_definitions (
    type text PRIMARY KEY,
    definition jsonb NOT NULL,
    version bigint NOT NULL DEFAULT nextval('event_definitions_version_seq'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION tenantd_event_definitions_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenantd_event_types', '');
    RETURN NULL;
END $$;

CREATE TRIGGER event_definitions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON event_definitions
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_event_definitions_changed();
