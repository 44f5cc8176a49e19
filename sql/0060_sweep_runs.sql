-- Bookkeeping of periodic sweeps, shared by every instance: the scheduler of any instance
-- runs a sweep only when its last start is older than the sweep's interval (checked and
-- recorded in one statement while holding the sweep's advisory lock), so N instances run
-- each sweep once per interval.
CREATE TABLE sweep_runs (
    name              text PRIMARY KEY,
    run_count         bigint NOT NULL DEFAULT 0,
    last_started_at   timestamptz,
    last_finished_at  timestamptz,
    last_status       text CHECK (last_status IN ('running', 'ok', 'failed', 'interrupted')),
    last_counts       jsonb NOT NULL DEFAULT '{}',
    last_error        text,
    last_instance     text,
    last_success_at   timestamptz
);

-- The rate-limit sweep deletes windows that ended long ago.
CREATE INDEX rate_limits_window_idx ON rate_limits (window_start);
