-- The claim walks ready jobs in (run_at, id) order and stops after one batch: with the id
-- in the index the scan needs no sort, so a claim costs the same with ten queued jobs or
-- a million (the old index on run_at alone made every claim sort the whole backlog).
DROP INDEX jobs_ready_idx;
CREATE INDEX jobs_ready_idx ON jobs (run_at, id) WHERE status = 'queued';
