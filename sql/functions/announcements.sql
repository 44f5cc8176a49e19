-- Publish after commit (issue 31; the table is sql/0380). Re-applied by every
-- `tenantd migrate`: edit here, never in a migration.
--
-- A transaction that runs NOTIFY takes a database-wide lock at commit, so no write
-- transaction does: every function that announces writes a row of `announcements`
-- (tenantd_announce) and each process's relay (tenantd/db/relay.py) publishes the rows
-- after commit. tenantd_publish_announcements is the only function that calls pg_notify
-- (tests/db/test_relay.py checks pg_proc), in a transaction of its own that writes nothing
-- but the deletion of what it published.

-- One announcement: published on `channel` after this transaction commits. PL/pgSQL, not
-- SQL: a SQL function's INSERT was planned again in every transaction that called it (~70 us
-- of a send's ~550), PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION tenantd_announce(p_channel text, p_payload text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO announcements (channel, payload) VALUES (p_channel, p_payload);
END $$;

-- The relay's publisher with TENANTD_BUS=postgres: up to `p_limit` rows, oldest first,
-- NOTIFYed and deleted in one transaction (the notifications are delivered at its commit, in
-- this order). One advisory lock orders every publisher of every process: the next one
-- waits, then sees what this one deleted, so each channel hears its rows in id order. How
-- many it published (fewer than `p_limit`: none left).
--
-- Its commit does not wait for the WAL flush (synchronous_commit off, for this transaction
-- only: the relay calls it as a statement of its own). What it writes is only the deletion of
-- rows already published; a crash that loses that commit brings them back, and they are
-- published again, as when a relay dies before committing (at least once). The sends that
-- wrote the rows committed durably.
CREATE OR REPLACE FUNCTION tenantd_publish_announcements(p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r record;
    done bigint[] := '{}';
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(735414, 1);
    FOR r IN SELECT a.id, a.channel, a.payload FROM announcements a ORDER BY a.id LIMIT p_limit
    LOOP
        PERFORM pg_notify(r.channel, r.payload);
        done := done || r.id;
    END LOOP;
    DELETE FROM announcements WHERE id = ANY (done);
    RETURN cardinality(done);
END $$;
