-- The dispatch rule of a notification, its two statements (a batch, one send) written here
-- only (re-applied by every `tenantd migrate` after the forward migrations: edit it here,
-- never in a migration; a change of a function's arguments or answer needs a forward
-- migration that drops the old one first).
--
-- tenantd_notification_dispatch_batch: many sends as one set-based statement, in order, each
-- with the answer it would get as one of that many statements in a row. A batch's
-- statement-level triggers (the inbox announcement, the delivery counts) fire once, and its
-- rows are written by one insert per table.
--
-- The only way one send of a batch could change another's outcome is a shared dedup key:
-- as statements in a row, the first send (of a user that exists) claims the key or finds it
-- live, and every later send with that key finds it live (windows are positive), so a
-- repeated key in a batch is a duplicate unless it is the first. Throttle counts are taken
-- before this statement, one by one.
--   a      the sends in order, with their recipient (found or not)
--   firsts the first send of each dedup key among existing recipients
--   dd     its claim: insert the key, or take over an expired one (no row: still live); a
--          concurrent identical insert waits for this one and then sees the live key
--   ch     each send's channels with the recipient's preferences and account defaults
--   ins    the notifications, keyed on the ids send() chose: a re-run job inserts nothing
--   d      one delivery row per channel: disabled -> suppressed, in_app/sse -> sent (the
--          row and the announcement are the delivery), email/web_push -> pending until
--          their job settles
--   ann    one announcement (sql/functions/announcements.sql) per sent SSE delivery, in
--          send order: the relay publishes it after commit (no NOTIFY in this transaction)
CREATE OR REPLACE FUNCTION tenantd_notification_dispatch_batch(
    p_ids uuid[], p_uids uuid[], p_aids uuid[], p_types text[], p_titles text[],
    p_bodies text[], p_cta_urls text[], p_cta_labels text[], p_payloads text[],
    p_dedup_keys text[], p_windows float8[], p_channels text[], p_forced text[],
    p_critical boolean[], p_topics text[]
) RETURNS TABLE (
    n bigint, user_found boolean, time_zone text, quiet_hours_start time,
    quiet_hours_end time, id uuid, created_at timestamptz, pending text[], published bigint
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH a AS MATERIALIZED (
        SELECT s.*, u.id IS NOT NULL AS found, u.time_zone AS tz,
               u.quiet_hours_start AS qs, u.quiet_hours_end AS qe
          FROM unnest(p_ids, p_uids, p_aids, p_types, p_titles, p_bodies, p_cta_urls,
                      p_cta_labels, p_payloads, p_dedup_keys, p_windows, p_channels, p_forced,
                      p_critical, p_topics)
               WITH ORDINALITY AS s(id, uid, aid, type, title, body, cta_url, cta_label,
                                    payload, dedup_key, win, channels, forced, critical,
                                    topic, n)
          LEFT JOIN users u ON u.id = s.uid
    ), firsts AS MATERIALIZED (
        SELECT DISTINCT ON (a.dedup_key) a.dedup_key, a.win, a.n
          FROM a
         WHERE a.found AND a.dedup_key IS NOT NULL
         ORDER BY a.dedup_key, a.n
    ), dd AS (
        INSERT INTO notification_dedup (dedup_key, expires_at)
        SELECT f.dedup_key, now() + make_interval(secs => f.win)
          FROM firsts f
         ORDER BY f.dedup_key
        ON CONFLICT (dedup_key) DO UPDATE
           SET expires_at = EXCLUDED.expires_at, created_at = now()
         WHERE notification_dedup.expires_at <= now()
        RETURNING dedup_key
    ), ch AS MATERIALIZED (
        SELECT a.n, c.channel, c.ord,
               (coalesce(p.enabled, ad.enabled, true) OR a.critical)
               AND a.forced IS NULL AS enabled
          FROM a
         CROSS JOIN LATERAL unnest(string_to_array(a.channels, ','))
               WITH ORDINALITY AS c(channel, ord)
          LEFT JOIN notification_preferences p
            ON p.user_id = a.uid AND p.event_type = a.type AND p.channel = c.channel
          LEFT JOIN notification_account_defaults ad
            ON ad.account_id = a.aid AND ad.event_type = a.type AND ad.channel = c.channel
         WHERE a.found
    ), ins AS (
        INSERT INTO notifications
            (id, user_id, account_id, event_type, title, body, cta_url, cta_label, payload,
             in_app)
        SELECT a.id, a.uid, a.aid, a.type, a.title, a.body, a.cta_url, a.cta_label,
               a.payload::jsonb,
               coalesce((SELECT ch.enabled FROM ch
                          WHERE ch.n = a.n AND ch.channel = 'in_app'), false)
          FROM a
         WHERE a.found
           AND (a.dedup_key IS NULL
                OR a.n IN (SELECT f.n FROM firsts f JOIN dd ON dd.dedup_key = f.dedup_key))
         ORDER BY a.n
        ON CONFLICT (id) DO NOTHING
        RETURNING id, created_at
    ), made AS MATERIALIZED (
        SELECT DISTINCT ON (ins.id) a.n, ins.id, ins.created_at
          FROM ins JOIN a ON a.id = ins.id
         ORDER BY ins.id, a.n
    ), d AS (
        INSERT INTO notification_deliveries (notification_id, channel, status, reason)
        SELECT made.id, ch.channel,
               CASE WHEN NOT ch.enabled THEN 'suppressed'
                    WHEN ch.channel IN ('in_app', 'sse') THEN 'sent'
                    ELSE 'pending' END,
               CASE WHEN NOT ch.enabled
                    THEN coalesce(a.forced, 'preference_disabled') END
          FROM made
          JOIN a ON a.n = made.n
          JOIN ch ON ch.n = made.n
         ORDER BY made.n, ch.ord
    ), ann AS (
        INSERT INTO announcements (channel, payload)
        SELECT a.topic, made.id::text
          FROM made
          JOIN a ON a.n = made.n
          JOIN ch ON ch.n = made.n AND ch.channel = 'sse' AND ch.enabled
         ORDER BY made.n, ch.ord
    )
    SELECT a.n, a.found, a.tz, a.qs, a.qe, made.id, made.created_at,
           CASE WHEN made.id IS NULL THEN '{}'::text[] ELSE ARRAY(
               SELECT ch.channel FROM ch
                WHERE ch.n = a.n AND ch.enabled AND ch.channel NOT IN ('in_app', 'sse')
                ORDER BY ch.ord) END,
           CASE WHEN made.id IS NULL THEN 0 ELSE (
               SELECT count(*) FROM ch
                WHERE ch.n = a.n AND ch.channel = 'sse' AND ch.enabled) END
      FROM a
      LEFT JOIN made ON made.n = a.n
     ORDER BY a.n;
END $$;


-- tenantd_notification_dispatch: one send (one round trip, atomic even without BEGIN): the
-- same rule as the batch above, for one send, with the same answer and writes
-- (tests/notifications/test_dispatch_batch.py runs both on the same sends). Not the batch of
-- one: the batch's set-based plan (unnest, materialized steps, sorts) cost one send ~1.8 times
-- the database CPU of this one (~780 against ~435 us a call), the dispatch_inline figure's fall.
CREATE OR REPLACE FUNCTION tenantd_notification_dispatch(
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
    ), ann AS (  -- the SSE announcement: the relay publishes it after commit
        INSERT INTO announcements (channel, payload)
        SELECT p_topic, n.id::text
          FROM n JOIN ch ON ch.channel = 'sse' AND ch.enabled
         ORDER BY ch.ord
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM u) > 0 AS user_found,
           (SELECT time_zone FROM u) AS time_zone,
           (SELECT quiet_hours_start FROM u) AS quiet_hours_start,
           (SELECT quiet_hours_end FROM u) AS quiet_hours_end,
           n.id, n.created_at,
           ARRAY(SELECT d.channel FROM d WHERE d.status = 'pending') AS pending,
           (SELECT count(*) FROM ann) AS published
      FROM (SELECT 1) AS one LEFT JOIN n ON true;
END $$;
