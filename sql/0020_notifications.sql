-- Notifications, part 2: the in-app channel can be turned off per event type.
-- The notification row is still written (email, SSE and web push deliveries refer to it),
-- but it stays out of the in-app inbox and its unread count.
ALTER TABLE notifications ADD COLUMN in_app boolean NOT NULL DEFAULT true;

DROP INDEX IF EXISTS notifications_user_unread_idx;
CREATE INDEX notifications_user_unread_idx ON notifications (user_id, created_at DESC, id DESC)
    WHERE status = 'unread' AND in_app;

