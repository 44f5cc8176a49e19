-- The dispatch of one notification as a function (tenantd_notification_dispatch). Its one
-- definition lives in sql/functions/notification_dispatch.sql, re-applied by every migrate
-- after the forward migrations (tenantd/db/migrate.py): this step once created it.
SELECT 1;
