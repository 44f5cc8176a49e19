-- Notifications beyond the anchors (issue 18): throttle counters (one fixed window per key)
-- and scheduled / delayed sends (the durable job carries the send; this row finds it for a
-- cancel by notification id or idempotency key).
CREATE TABLE notification_throttles (
    throttle_key  text PRIMARY KEY,
    window_start  timestamptz NOT NULL,
    count         integer NOT NULL
);

CREATE TABLE scheduled_notifications (
    notification_id    uuid PRIMARY KEY,
    idempotency_key    text,
    job_id             bigint NOT NULL,
    event_type         text NOT NULL,
    recipient_user_id  uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    deliver_at         timestamptz NOT NULL,
    cancelled_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX scheduled_notifications_idempotency_key
    ON scheduled_notifications (idempotency_key) WHERE idempotency_key IS NOT NULL;
