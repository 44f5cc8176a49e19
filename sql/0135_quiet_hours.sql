-- Quiet hours (issue 18): non-critical email and web push wait until the end of the user's
-- quiet hours, read in the user's IANA time zone (both ends set, or none).
ALTER TABLE users ADD COLUMN time_zone text;
ALTER TABLE users ADD COLUMN quiet_hours_start time;
ALTER TABLE users ADD COLUMN quiet_hours_end time;
