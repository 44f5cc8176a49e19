-- The transactional outbox: one row per application event, written in the transaction of
-- the change it describes (a rolled-back change leaves no row).
--
-- `id` is the insertion order, which is NOT the commit order: a transaction that took its
-- id first may commit last, so a reader paging by `id` would skip it for good. `seq`
-- is the commit-ordered cursor: it stays NULL until a single sequencer (tenantd/outbox,
-- serialised by the row lock on outbox_sequencer) numbers the rows that have committed, in
-- id order, after every seq it handed out before. Readers (the events API, webhook
-- fan-out) page by `seq` only, so a row that commits late gets a later seq
-- instead of landing behind a cursor that already moved on.
CREATE TABLE outbox_events (
    id          bigserial PRIMARY KEY,
    seq    bigint UNIQUE,
    event_id    text NOT NULL UNIQUE,            -- evt_...: the public, stable id
    type        text NOT NULL,
    account_id  uuid,                            -- no foreign key: events outlive accounts
    subject     text NOT NULL,                   -- the object it is about ("user:<id>")
    actor_type  text NOT NULL CHECK (actor_type IN ('user', 'operator', 'system', 'api_key')),
    actor_id    text,
    data        jsonb NOT NULL,
    previous    jsonb,
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX outbox_events_unsequenced_idx ON outbox_events (id) WHERE seq IS NULL;
CREATE INDEX outbox_events_occurred_idx ON outbox_events (occurred_at);

CREATE TABLE outbox_sequencer (
    id            int PRIMARY KEY CHECK (id = 1),
    last_seq bigint NOT NULL
);
INSERT INTO outbox_sequencer (id, last_seq) VALUES (1, 0);
