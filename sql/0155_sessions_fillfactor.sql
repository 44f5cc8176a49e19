-- Refresh rotation (issue 19) marks the presented row rotated (rotated_at, not indexed) and
-- inserts its successor. Room left on each page lets that update be HOT: the row version
-- stays on its page and none of the table's five indexes gets a new entry for it. Pages
-- written from now on keep the room; existing ones gain it as they are rewritten.
ALTER TABLE sessions SET (fillfactor = 80);
