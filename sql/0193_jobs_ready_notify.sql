-- A runner hears of new work at once, whichever instance queued it (issue 19). Runners
-- found jobs queued by another process (another instance, the CLI, a separate sender) only
-- at their next poll, up to TENANTD_JOB_POLL_SECONDS later. Now a statement that inserts a
-- job due now sends one NOTIFY on `tenantd_jobs` (PostgreSQL folds identical ones within a
-- transaction), delivered at commit to every instance's listener, which wakes its runner.
-- Delayed jobs, retries and expired leases are still found by the poll.
CREATE FUNCTION tenantd_jobs_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'queued' AND run_at <= now()) THEN
        PERFORM pg_notify('tenantd_jobs', '');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_ready_notify AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenantd_jobs_ready();
