-- A batch of dispatches as one set-based statement (issue 19):
-- tenantd_notification_dispatch_batch. Its one definition lives in
-- sql/functions/notification_dispatch.sql, re-applied by every migrate after the forward
-- migrations (tenantd/db/migrate.py): this step once created it.
SELECT 1;
