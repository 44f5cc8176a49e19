-- Inbox invalidations (sql/0071) once per statement, not once per user (issue 19).
-- A statement that writes the notifications of one user still announces `inbox:<user>`.
-- One that writes those of several users (a batch of dispatches) announced each user with
-- its own NOTIFY and its own NOTICE: every NOTICE is flushed to the client at once (a
-- send() and a wake-up of the writing process per user), and a batch could not exceed the
-- 50 notices psycopg2 keeps per transaction. Now such a statement announces
-- `inboxes:<user>,<user>,...` (at most 150 users a message: a NOTIFY payload is under 8,000
-- bytes), one NOTIFY and one NOTICE per message. A reader that does not know `inboxes`
-- matches `inbox` without an id and flushes its whole cache: stale never, slower at worst.

CREATE FUNCTION tenantd_cache_announce_inboxes(ids uuid[]) RETURNS void
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
        PERFORM pg_notify('tenantd_cache', 'inboxes:' || listed);
        RAISE NOTICE 'tenantd_cache:inboxes:%', listed;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION tenantd_cache_inbox_new() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce_inboxes(ARRAY(SELECT DISTINCT user_id FROM new_rows));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION tenantd_cache_inbox_old() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenantd_cache_announce_inboxes(ARRAY(SELECT DISTINCT user_id FROM old_rows));
    RETURN NULL;
END $$;
