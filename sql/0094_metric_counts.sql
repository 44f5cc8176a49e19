-- Row counts for /metrics, maintained on write so a scrape never counts a big table.
--
-- Every statement that inserts, updates or deletes jobs, notification deliveries or email
-- suppressions appends its net change per label pair (statement-level triggers with
-- transition tables: a 64-job claim adds one or two rows, not 64). Rows are only ever
-- appended, so concurrent writers never wait for each other on a counter row (the job
-- queue's enqueue runs inside its caller's transaction). The sum of `delta` per
-- (family, a, b) is the exact row count; the metrics refresh of tenantd serve folds the
-- rows into one per key every TENANTD_METRICS_REFRESH_SECONDS, so a sum reads a few rows.
CREATE TABLE metric_counts (
    family  text NOT NULL,           -- jobs | deliveries | suppressions
    a       text NOT NULL,           -- jobs: status; deliveries: channel; suppressions: provider
    b       text NOT NULL DEFAULT '',  -- deliveries: status; suppressions: reason
    delta   bigint NOT NULL
);

-- Folding (ops/metrics.py) and the TRUNCATE triggers below take this advisory lock, so a
-- truncation never interleaves with a fold and leaves a folded row of the old contents.
CREATE FUNCTION metric_counts_forget(name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(735494, 0);
    DELETE FROM metric_counts WHERE family = name;
END $$;

CREATE FUNCTION metric_counts_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO metric_counts (family, a, delta)
        SELECT 'jobs', status, count(*) FROM new_rows GROUP BY status;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO metric_counts (family, a, delta)
        SELECT 'jobs', status, -count(*) FROM old_rows GROUP BY status;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO metric_counts (family, a, delta)
        SELECT 'jobs', status, sum(d) FROM (
            SELECT status, 1 AS d FROM new_rows
            UNION ALL SELECT status, -1 FROM old_rows
        ) changed GROUP BY status HAVING sum(d) <> 0;
    ELSE
        PERFORM metric_counts_forget('jobs');
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION metric_counts_deliveries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'deliveries', channel, status, count(*) FROM new_rows GROUP BY channel, status;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'deliveries', channel, status, -count(*) FROM old_rows GROUP BY channel, status;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'deliveries', channel, status, sum(d) FROM (
            SELECT channel, status, 1 AS d FROM new_rows
            UNION ALL SELECT channel, status, -1 FROM old_rows
        ) changed GROUP BY channel, status HAVING sum(d) <> 0;
    ELSE
        PERFORM metric_counts_forget('deliveries');
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION metric_counts_suppressions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'suppressions', provider, reason, count(*) FROM new_rows GROUP BY provider, reason;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'suppressions', provider, reason, -count(*) FROM old_rows
        GROUP BY provider, reason;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO metric_counts (family, a, b, delta)
        SELECT 'suppressions', provider, reason, sum(d) FROM (
            SELECT provider, reason, 1 AS d FROM new_rows
            UNION ALL SELECT provider, reason, -1 FROM old_rows
        ) changed GROUP BY provider, reason HAVING sum(d) <> 0;
    ELSE
        PERFORM metric_counts_forget('suppressions');
    END IF;
    RETURN NULL;
END $$;

-- Transition tables allow one event per trigger: three triggers (and TRUNCATE) per table.
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_jobs();
CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_jobs();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_jobs();
CREATE TRIGGER jobs_count_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_jobs();

CREATE TRIGGER deliveries_count_insert AFTER INSERT ON notification_deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_deliveries();
CREATE TRIGGER deliveries_count_update AFTER UPDATE ON notification_deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_deliveries();
CREATE TRIGGER deliveries_count_delete AFTER DELETE ON notification_deliveries
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_deliveries();
CREATE TRIGGER deliveries_count_truncate AFTER TRUNCATE ON notification_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_deliveries();

CREATE TRIGGER suppressions_count_insert AFTER INSERT ON email_suppressions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_suppressions();
CREATE TRIGGER suppressions_count_update AFTER UPDATE ON email_suppressions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_suppressions();
CREATE TRIGGER suppressions_count_delete AFTER DELETE ON email_suppressions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_suppressions();
CREATE TRIGGER suppressions_count_truncate AFTER TRUNCATE ON email_suppressions
    FOR EACH STATEMENT EXECUTE FUNCTION metric_counts_suppressions();

-- The rows already there. CREATE TRIGGER locked each table against writes until this
-- migration commits, so nothing is counted twice or missed.
INSERT INTO metric_counts (family, a, delta)
SELECT 'jobs', status, count(*) FROM jobs GROUP BY status;
INSERT INTO metric_counts (family, a, b, delta)
SELECT 'deliveries', channel, status, count(*) FROM notification_deliveries
GROUP BY channel, status;
INSERT INTO metric_counts (family, a, b, delta)
SELECT 'suppressions', provider, reason, count(*) FROM email_suppressions
GROUP BY provider, reason;
