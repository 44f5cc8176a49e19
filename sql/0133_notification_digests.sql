-- Digests (issue 18): sends of an event with `digest=` collect under one open digest per key
-- (one per recipient and key, across instances: the partial unique index); a durable job due
-- when the window closes turns the digest into one notification per channel.
CREATE TABLE notification_digests (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    digest_key    text NOT NULL,
    user_id       uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    account_id    uuid,
    event_type    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    flushed_at    timestamptz
);
CREATE UNIQUE INDEX notification_digests_open_key
    ON notification_digests (digest_key) WHERE flushed_at IS NULL;

CREATE TABLE notification_digest_items (
    item_id     uuid PRIMARY KEY,
    digest_id   uuid NOT NULL REFERENCES notification_digests(id) ON DELETE CASCADE,
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_digest_items_digest_idx ON notification_digest_items (digest_id);
