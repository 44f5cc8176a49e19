-- The whole dispatch of one notification as a function (one round trip, atomic): what
-- tenantd/notifications/queries.py runs for one send, and, called once per row of a batch
-- (LATERAL), for many sends in one statement. Each call's statements see the calls before
-- it (a volatile function takes a new snapshot per statement), so two sends of a batch with
-- one dedup key behave as two statements in a row: the first wins.
--   u   the recipient exists
--   dd  dedup: insert the key, or take over an expired one; a live key yields no row, and a
--       concurrent identical insert waits for this one and then sees the live key
--   ch  the event's channels with the recipient's preferences
--   n   the notification, keyed on the id chosen by send(): a re-run job inserts nothing
--   d   one delivery row per channel: disabled -> suppressed, in_app/sse -> sent (the row
--       and the NOTIFY are the delivery), email/web_push -> pending until their job settles
-- pg_notify is transactional: listeners see it only after commit.
CREATE FUNCTION tenantd_notification_dispatch(
    p_id uuid, p_uid uuid, p_aid uuid, p_type text, p_title text, p_body text,
    p_cta_url text, p_cta_label text, p_payload jsonb, p_dedup_key text, p_window float8,
    p_channels text[], p_forced_reason text, p_critical boolean, p_topic text
) RETURNS TABLE (
    user_found boolean, time_zone text, quiet_hours_start time, quiet_hours_end time,
    id uuid, created_at timestamptz, pending text[], published bigint
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH u AS (
        SELECT id, time_zone, quiet_hours_start, quiet_hours_end FROM users WHERE id = p_uid
    ), dd AS (
        INSERT INTO notification_dedup (dedup_key, expires_at)
        SELECT p_dedup_key, now() + make_interval(secs => p_window)
          FROM u WHERE p_dedup_key IS NOT NULL
        ON CONFLICT (dedup_key) DO UPDATE
           SET expires_at = EXCLUDED.expires_at, created_at = now()
         WHERE notification_dedup.expires_at <= now()
        RETURNING 1
    ), ch AS (
        SELECT c.channel, c.ord,
               (coalesce(p.enabled, ad.enabled, true) OR p_critical)
               AND p_forced_reason IS NULL AS enabled
          FROM unnest(p_channels) WITH ORDINALITY AS c(channel, ord)
          LEFT JOIN notification_preferences p
            ON p.user_id = p_uid AND p.event_type = p_type
           AND p.channel = c.channel
          LEFT JOIN notification_account_defaults ad
            ON ad.account_id = p_aid AND ad.event_type = p_type
           AND ad.channel = c.channel
    ), n AS (
        INSERT INTO notifications
            (id, user_id, account_id, event_type, title, body, cta_url, cta_label, payload, in_app)
        SELECT p_id, u.id, p_aid, p_type, p_title,
               p_body, p_cta_url, p_cta_label, p_payload,
               coalesce((SELECT enabled FROM ch WHERE channel = 'in_app'), false)
          FROM u
         WHERE p_dedup_key IS NULL OR EXISTS (SELECT 1 FROM dd)
        ON CONFLICT (id) DO NOTHING
        RETURNING id, created_at
    ), d AS (
        INSERT INTO notification_deliveries (notification_id, channel, status, reason)
        SELECT n.id, ch.channel,
               CASE WHEN NOT ch.enabled THEN 'suppressed'
                    WHEN ch.channel IN ('in_app', 'sse') THEN 'sent'
                    ELSE 'pending' END,
               CASE WHEN NOT ch.enabled
                    THEN coalesce(p_forced_reason, 'preference_disabled') END
          FROM n CROSS JOIN ch
         ORDER BY ch.ord
        RETURNING channel, status
    )
    SELECT (SELECT count(*) FROM u) > 0 AS user_found,
           (SELECT time_zone FROM u) AS time_zone,
           (SELECT quiet_hours_start FROM u) AS quiet_hours_start,
           (SELECT quiet_hours_end FROM u) AS quiet_hours_end,
           n.id, n.created_at,
           ARRAY(SELECT d.channel FROM d WHERE d.status = 'pending') AS pending,
           (SELECT count(*) FROM d
             WHERE d.channel = 'sse' AND d.status = 'sent'
               AND pg_notify(p_topic, n.id::text) IS NOT NULL) AS published
      FROM (SELECT 1) AS one LEFT JOIN n ON true;
END $$;
