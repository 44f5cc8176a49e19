-- Publish after commit (issue 31 part 1). A transaction that runs NOTIFY takes a
-- database-wide lock at commit, so every writer that notified queued behind the others. No
-- write transaction notifies any more: what it announces (cache invalidations, revocations,
-- key and event-type changes, inbox and SSE announcements) is a row here, written by
-- tenantd_announce (sql/functions/announcements.sql), and published after commit by each
-- process's relay (tenantd/db/relay.py): tenantd_publish_announcements, the one function
-- that calls pg_notify, or the bus (TENANTD_BUS=nats|redis). Rows are published in id order
-- under one advisory lock (in order per channel, at least once) and deleted as published.
CREATE TABLE announcements (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel text NOT NULL,
    payload text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The functions that announced with pg_notify write rows instead (tenantd_announce). The
-- cache's NOTICE stays: it reaches the writing process itself at once (it refuses a revoked
-- token on the very next request), before any relay has published.

-- The context cache's invalidations (sql/0070). Payloads: user:<uuid>, account:<uuid>,
-- jti:<uuid>, session:<uuid>, apikey:<uuid>, inbox:<uuid>.
CREATE OR REPLACE FUNCTION tenantd_cache_announce(kind text, id uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF id IS NULL THEN
        RETURN;
    END IF;
    PERFORM tenantd_announce('tenantd_cache', kind || ':' || id::text);
    RAISE NOTICE 'tenantd_cache:%:%', kind, id;
END $$;

CREATE OR REPLACE FUNCTION tenantd_cache_plans() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_announce('tenantd_cache', 'all');
    RAISE NOTICE 'tenantd_cache:all';
    RETURN NULL;
END $$;

-- Inbox invalidations once per statement (sql/0191): `inboxes:<user>,...`, 150 users a row.
CREATE OR REPLACE FUNCTION tenantd_cache_announce_inboxes(ids uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    listed text;
BEGIN
    IF cardinality(ids) = 1 THEN
        PERFORM tenantd_cache_announce('inbox', ids[1]);
        RETURN;
    END IF;
    FOR listed IN
        SELECT string_agg(u.id::text, ',' ORDER BY u.k)
          FROM unnest(ids) WITH ORDINALITY AS u(id, k)
         WHERE u.id IS NOT NULL
         GROUP BY (u.k - 1) / 150
    LOOP
        PERFORM tenantd_announce('tenantd_cache', 'inboxes:' || listed);
        RAISE NOTICE 'tenantd_cache:inboxes:%', listed;
    END LOOP;
END $$;

-- Every change of signing_keys (sql/0100): each instance reloads its keyring.
CREATE OR REPLACE FUNCTION tenantd_keys_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_announce('tenantd_keys', '');
    RETURN NULL;
END $$;

-- Every change of event_definitions (sql/0280): each instance reloads its stored types.
CREATE OR REPLACE FUNCTION tenantd_event_definitions_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_announce('tenantd_event_types', '');
    RETURN NULL;
END $$;
