-- Outbound webhooks: operator-managed endpoints and one delivery row per (event, endpoint).
CREATE TABLE webhook_endpoints (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    url                     text NOT NULL,
    description             text NOT NULL DEFAULT '',
    event_types             text[] NOT NULL DEFAULT '{}',  -- empty: every type
    secret                  text NOT NULL,                 -- whsec_...
    previous_secret         text,                          -- still signs until it expires
    previous_secret_expires_at timestamptz,
    failing_since           timestamptz,                   -- first failure since the last success
    disabled_at             timestamptz,
    disabled_reason         text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

-- status: pending (due or retrying) -> delivered | failed. job_id is the one job allowed to
-- act on the row: a stale job (run again after a crash) finds another id and does nothing.
CREATE TABLE webhook_deliveries (
    id               bigserial PRIMARY KEY,
    endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    event_row        bigint NOT NULL REFERENCES outbox_events(id) ON DELETE CASCADE,
    seq         bigint NOT NULL,       -- the event's commit-order seq
    subject          text NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         int NOT NULL DEFAULT 0,
    job_id           bigint,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz,
    last_attempt_at  timestamptz,
    last_status_code int,
    last_error       text,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_row);
-- Per-object order: a delivery waits while an earlier one of its (endpoint, subject) is open.
CREATE INDEX webhook_deliveries_open_idx ON webhook_deliveries (endpoint_id, subject, seq)
    WHERE status = 'pending';
