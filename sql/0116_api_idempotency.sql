-- Idempotency of server routes (issue 15): a request that repeats an `Idempotency-Key` of the
-- same API key and route gets the first answer back for 24 hours. The row is written in the
-- transaction of the work it stands for, so a concurrent duplicate's INSERT waits for that
-- transaction: on commit it finds the answer, on rollback it does the work itself.
CREATE TABLE api_idempotency_keys (
    api_key_id       uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    route            text NOT NULL,
    idempotency_key  text NOT NULL,
    request_hash     bytea NOT NULL,     -- SHA-256 of the request body: another body is 409
    response         jsonb,              -- the answer's data (set before the commit)
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (api_key_id, route, idempotency_key)
);
CREATE INDEX api_idempotency_keys_created_idx ON api_idempotency_keys (created_at);
