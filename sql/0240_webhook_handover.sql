-- Webhook deliveries recorded one by one as they succeed, and per-object order kept without
-- polling (issue 26).
--
-- A delivery whose earlier sibling (same endpoint and subject) is still open is *parked*:
-- pending with no job (job_id NULL). It is handed over to a new job by whatever settles an
-- earlier sibling of its object (delivered, failed for good, endpoint disabled): the
-- statement that settles runs first, then the hand-over looks for parked rows with a fresh
-- snapshot (plpgsql takes one per statement in READ COMMITTED), so a row parked (and
-- committed) while the settle waited for it is seen. A parker re-checks its blockers with
-- FOR SHARE after its park committed, so a settle in progress then is waited for; one of the
-- two always moves the row on. A parked row is handed over only when no earlier sibling is
-- still open in a job: the hand-over is one job per object's run of parked rows, not one per
-- settle.

-- Parked rows of an object, in order.
CREATE INDEX webhook_deliveries_parked_idx ON webhook_deliveries (endpoint_id, subject, seq)
    WHERE status = 'pending' AND job_id IS NULL;

-- Hand the parked successors of the objects of `p_ids` (rows just settled) to new jobs of
-- `p_kind` (up to `p_chunk` deliveries each, in order); the number of jobs made.
CREATE FUNCTION tenantd_webhook_hand_over(
    p_ids bigint[], p_kind text, p_max_attempts int, p_chunk int
) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    made int;
BEGIN
    WITH objects AS (
        SELECT DISTINCT d.endpoint_id, d.subject
          FROM webhook_deliveries d
         WHERE d.id = ANY(p_ids)),
    parked AS (
        SELECT w.id, w.endpoint_id, w.subject, w.seq,
               (row_number() OVER (PARTITION BY w.endpoint_id, w.subject ORDER BY w.seq) - 1)
                   / p_chunk AS chunk
          FROM objects o
          JOIN webhook_deliveries w
            ON w.endpoint_id = o.endpoint_id AND w.subject = o.subject
         WHERE w.status = 'pending' AND w.job_id IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM webhook_deliveries p
                WHERE p.endpoint_id = w.endpoint_id AND p.subject = w.subject
                  AND p.seq < w.seq AND p.status = 'pending' AND p.job_id IS NOT NULL)),
    batches AS (
        SELECT array_agg(id ORDER BY seq) AS ids
          FROM parked
         GROUP BY endpoint_id, subject, chunk),
    made_jobs AS (
        INSERT INTO jobs (kind, payload, max_attempts)
        SELECT p_kind, jsonb_build_object('deliveries', to_jsonb(b.ids)), p_max_attempts
          FROM batches b
        RETURNING id, payload),
    claimed AS (
        UPDATE webhook_deliveries d SET job_id = j.id
          FROM made_jobs j
         CROSS JOIN LATERAL jsonb_array_elements_text(j.payload -> 'deliveries') AS x(id)
         WHERE d.id = x.id::bigint AND d.job_id IS NULL AND d.status = 'pending'
        RETURNING d.id)
    SELECT count(*) INTO made FROM made_jobs;
    RETURN made;
END
$$;

-- Record deliveries that succeeded (one statement per wave of answers), then hand over
-- their objects' parked successors; the number of jobs made.
CREATE FUNCTION tenantd_webhook_delivered(
    p_ids bigint[], p_codes int[], p_kind text, p_max_attempts int, p_chunk int
) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE webhook_deliveries d
       SET status = 'delivered', attempts = d.attempts + 1, delivered_at = now(),
           last_attempt_at = now(), first_attempt_at = coalesce(d.first_attempt_at, now()),
           last_status_code = r.code, last_error = NULL, job_id = NULL
      FROM unnest(p_ids, p_codes) AS r(id, code)
     WHERE d.id = ANY(p_ids) AND d.id = r.id AND d.status = 'pending';
    RETURN tenantd_webhook_hand_over(p_ids, p_kind, p_max_attempts, p_chunk);
END
$$;
