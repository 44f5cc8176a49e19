-- Delivery rows are found by (notification_id, channel) and by nothing else (issue 19): no
-- statement reads or joins them on their `id`, and nothing references it. Its primary-key
-- index was one more insert per delivery row (two to four a notification) at a random
-- leaf of an index as large as the notifications' own key (410 MB at 10M rows). It goes;
-- the row's key is the unique, NOT NULL (notification_id, channel), kept as it is (making
-- it the primary key would rebuild it under an exclusive lock), and it identifies rows for
-- logical replication. The `id` column stays, with its default, unindexed.
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_pkey;
ALTER TABLE notification_deliveries
    REPLICA IDENTITY USING INDEX notification_deliveries_notification_id_channel_key;
