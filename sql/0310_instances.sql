-- What each running `tenantd serve` reports about itself (issue 28 part 7), so `tenantd
-- status` shows the service's own view and where the CLI's configuration differs from it.
-- Written at start, refreshed every TENANTD_INSTANCE_HEARTBEAT_SECONDS, deleted on a clean
-- shutdown; a row whose heartbeat is older than three of its intervals is stale (the process
-- died without saying so). Nothing secret: switches and names only (tenantd/ops/instances.py).
-- Not job_workers: that table lists job runners (a server with nothing to run has none) by
-- their database session; this one lists servers by what they were configured with.
CREATE TABLE instances (
    instance          text PRIMARY KEY,
    host              text NOT NULL,
    pid               integer NOT NULL,
    listen            text,
    version           text NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    heartbeat_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_seconds double precision NOT NULL,
    switches          jsonb NOT NULL DEFAULT '{}',
    event_types       text[] NOT NULL DEFAULT '{}'
);
