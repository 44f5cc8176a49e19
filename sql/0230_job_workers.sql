-- Who runs jobs (issue 26): every job runner registers the database session it keeps open
-- for as long as it lives (its presence connection). A running job whose worker's session
-- has left pg_stat_activity (the process died) is queued again at the next look of any
-- runner, instead of after its lease; a session registered before the server last started
-- proves nothing (a restart ends every session) and waits for its worker to register again.
CREATE TABLE job_workers (
    worker        text PRIMARY KEY,
    backend_pid   integer NOT NULL,
    backend_start timestamptz NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);
