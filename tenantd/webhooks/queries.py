"""Statements of outbound webhooks: endpoints and deliveries (hot paths hand-written)."""

from __future__ import annotations

ENDPOINT_COLUMNS = (
    "id, url, description, event_types, previous_secret_expires_at, failing_since,"
    " disabled_at, disabled_reason, created_at, updated_at"
)

INSERT_ENDPOINT = f"""
INSERT INTO webhook_endpoints (id, url, description, event_types, secret_sealed)
VALUES (%(id)s, %(url)s, %(description)s, %(types)s::text[], %(sealed)s)
RETURNING {ENDPOINT_COLUMNS}
"""

LIST_ENDPOINTS = f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY created_at, id"

GET_ENDPOINT = f"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = %(id)s"

DELETE_ENDPOINT = "DELETE FROM webhook_endpoints WHERE id = %(id)s"
# Before the endpoint: a settling delivery job locks its deliveries, then the endpoint row;
# removing takes them in that order too (the cascade alone would go endpoint first).
DELETE_ENDPOINT_DELIVERIES = "DELETE FROM webhook_deliveries WHERE endpoint_id = %(id)s"

LOCK_ENDPOINT_SECRET = """
SELECT id, secret, secret_sealed FROM webhook_endpoints WHERE id = %(id)s FOR UPDATE
"""

# The old secret keeps signing next to the new one until it expires (none: it ended now).
ROTATE_SECRET = f"""
UPDATE webhook_endpoints
   SET previous_secret_sealed = %(previous)s, previous_secret = NULL,
       previous_secret_expires_at = CASE WHEN %(previous)s::bytea IS NULL THEN NULL
            ELSE now() + make_interval(secs => %(overlap)s::float8) END,
       secret_sealed = %(sealed)s, secret = NULL, updated_at = now()
 WHERE id = %(id)s
RETURNING {ENDPOINT_COLUMNS}
"""

LOCK_CLEAR_SECRET = """
SELECT id, secret, secret_sealed, previous_secret, previous_secret_sealed
  FROM webhook_endpoints
 WHERE secret IS NOT NULL OR previous_secret IS NOT NULL
 LIMIT 1
   FOR UPDATE SKIP LOCKED
"""

STORE_SEALED_SECRETS = """
UPDATE webhook_endpoints
   SET secret_sealed = %(current)s, secret = NULL,
       previous_secret_sealed = %(previous)s, previous_secret = NULL
 WHERE id = %(id)s
"""

ENABLE_ENDPOINT = f"""
UPDATE webhook_endpoints
   SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL, updated_at = now()
 WHERE id = %(id)s
RETURNING {ENDPOINT_COLUMNS}
"""

# Fan-out: the enabled endpoints (a handful of rows) with their type filters.
ENABLED_ENDPOINTS = (
    "SELECT id, event_types FROM webhook_endpoints WHERE disabled_at IS NULL ORDER BY id"
)

# Fan-out writes each delivery once, already naming the job that sends it: the ids are
# handed out first (each job's payload lists its deliveries), then jobs and deliveries are
# inserted, so no second write of every row sets its job.
ALLOCATE_DELIVERY_IDS = (
    "SELECT nextval('webhook_deliveries_id_seq') AS id FROM generate_series(1, %(n)s::int)"
)

INSERT_DELIVERIES = """
INSERT INTO webhook_deliveries (id, endpoint_id, event_row, seq, subject, job_id)
SELECT * FROM unnest(%(ids)s::bigint[], %(endpoints)s::uuid[], %(events)s::bigint[],
                     %(seqs)s::bigint[], %(subjects)s::text[], %(jobs)s::bigint[])
"""

# Replay locks the endpoint (a concurrent remove or enable waits) and reads its filter.
LOCK_ENDPOINT = "SELECT id, event_types FROM webhook_endpoints WHERE id = %(id)s FOR UPDATE"

# The test event goes to its endpoint only, outside the fan-out (seq 0: it orders nothing).
EVENT_ROW = "SELECT id, subject FROM outbox_events WHERE event_id = %(event_id)s"

INSERT_TEST_DELIVERY = """
INSERT INTO webhook_deliveries (endpoint_id, event_row, seq, subject)
VALUES (%(endpoint)s, %(event_row)s, 0, %(subject)s)
RETURNING id
"""

SET_JOBS = """
UPDATE webhook_deliveries d SET job_id = j.job_id
  FROM unnest(%(ids)s::bigint[], %(jobs)s::bigint[]) AS j(id, job_id)
 WHERE d.id = ANY(%(ids)s::bigint[]) AND d.id = j.id
"""

# Everything one batch of delivery jobs needs, in one round trip, with what holds each
# delivery back: an earlier open delivery of the same (endpoint, subject) outside this batch
# (`blocked`). LATERAL keeps the plan to one probe of the open-deliveries index per
# delivery, whatever the statistics say (a join the planner may turn around walks every open
# delivery: seconds with a backlog).
LOAD_DELIVERIES = """
SELECT d.id, d.job_id, d.status, d.attempts, d.endpoint_id, d.subject, d.seq,
       d.first_attempt_at, e.event_id, e.type, e.account_id, e.actor_type, e.actor_id,
       e.data, e.previous, e.occurred_at, ep.url, ep.secret, ep.secret_sealed,
       ep.previous_secret, ep.previous_secret_sealed,
       ep.previous_secret_expires_at > now() AS previous_secret_live, ep.disabled_at,
       ep.failing_since IS NOT NULL AS endpoint_failing, b.blocked
  FROM webhook_deliveries d
  JOIN outbox_events e ON e.id = d.event_row
  JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
 CROSS JOIN LATERAL (
       SELECT EXISTS (
              SELECT 1 FROM webhook_deliveries p
               WHERE p.endpoint_id = d.endpoint_id AND p.subject = d.subject AND p.seq < d.seq
                 AND p.status = 'pending' AND p.id <> ALL(%(ids)s::bigint[])) AS blocked) AS b
 WHERE d.id = ANY(%(ids)s::bigint[])
"""

# A parked delivery is pending with no job: whatever settles an earlier delivery of its
# object hands it over to a new job (sql/0240).
PARK = """
UPDATE webhook_deliveries SET job_id = NULL
 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'pending'
"""

# The parked rows' open earlier siblings outside the batch, locked in id order (FOR SHARE
# waits for a settle in progress, and a settle waits for this transaction): a row with none
# left goes back to its job.
BLOCKERS = """
SELECT d.id AS waiter
  FROM webhook_deliveries d
  JOIN webhook_deliveries p
    ON p.endpoint_id = d.endpoint_id AND p.subject = d.subject AND p.seq < d.seq
 WHERE d.id = ANY(%(ids)s::bigint[]) AND p.status = 'pending'
   AND p.id <> ALL(%(batch)s::bigint[])
 ORDER BY p.id
   FOR SHARE OF p
"""

UNPARK = """
UPDATE webhook_deliveries d SET job_id = r.job_id
  FROM unnest(%(ids)s::bigint[], %(jobs)s::bigint[]) AS r(id, job_id)
 WHERE d.id = ANY(%(ids)s::bigint[]) AND d.id = r.id AND d.job_id IS NULL
   AND d.status = 'pending'
"""

# Deliveries that succeeded, recorded at once, their objects' parked successors handed over
# (sql/0240); the number of jobs made.
RECORD_DELIVERED = """
SELECT tenantd_webhook_delivered(%(ids)s::bigint[], %(codes)s::int[], %(kind)s::text,
                                 %(max_attempts)s::int, %(chunk)s::int)
"""

HAND_OVER = """
SELECT tenantd_webhook_hand_over(%(ids)s::bigint[], %(kind)s::text, %(max_attempts)s::int,
                                 %(chunk)s::int)
"""

# A settle's rows, locked before it changes any, in id order as BLOCKERS takes its shares: a
# settle that locked a held delivery before its failed earlier sibling would wait on a park
# holding a share of the earlier one and waiting for the later one (a deadlock).
LOCK_SETTLING = """
SELECT id FROM webhook_deliveries WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id
   FOR NO KEY UPDATE
"""

SETTLE_FAILED = """
UPDATE webhook_deliveries d
   SET status = CASE WHEN r.final THEN 'failed' ELSE 'pending' END,
       attempts = d.attempts + 1, last_attempt_at = now(),
       first_attempt_at = coalesce(d.first_attempt_at, now()),
       next_attempt_at = now() + make_interval(secs => r.delay),
       last_status_code = r.code, last_error = r.error,
       job_id = CASE WHEN r.final THEN NULL ELSE d.job_id END
  FROM unnest(%(ids)s::bigint[], %(codes)s::int[], %(errors)s::text[], %(finals)s::bool[],
              %(delays)s::float8[]) AS r(id, code, error, final, delay)
 WHERE d.id = ANY(%(ids)s::bigint[]) AND d.id = r.id AND d.status = 'pending'
"""

FAIL_DISABLED = """
UPDATE webhook_deliveries SET status = 'failed', last_error = 'endpoint disabled', job_id = NULL
 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'pending'
"""

ENDPOINTS_SUCCEEDED = """
UPDATE webhook_endpoints SET failing_since = NULL
 WHERE id = ANY(%(ids)s::uuid[]) AND failing_since IS NOT NULL
"""

# An endpoint failing for `disable_after` seconds with no success in between is disabled.
ENDPOINTS_FAILED = """
UPDATE webhook_endpoints
   SET failing_since = coalesce(failing_since, now()),
       disabled_at = CASE WHEN failing_since < now() - make_interval(secs => %(after)s::float8)
                          THEN now() END,
       disabled_reason = CASE WHEN failing_since < now() - make_interval(secs => %(after)s::float8)
                              THEN 'failing since ' || failing_since::text END,
       updated_at = now()
 WHERE id = ANY(%(ids)s::uuid[]) AND disabled_at IS NULL
RETURNING id, url, disabled_at, failing_since
"""

LIST_DELIVERIES = """
SELECT d.id, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.last_status_code,
       d.last_error, d.delivered_at, d.created_at, e.event_id, e.type
  FROM webhook_deliveries d JOIN outbox_events e ON e.id = d.event_row
 WHERE d.endpoint_id = %(endpoint)s AND (NOT %(failed)s OR d.status = 'failed')
 ORDER BY d.id DESC
 LIMIT %(limit)s
"""

STATUS = """
SELECT ep.id, ep.url, ep.disabled_at, ep.failing_since,
       count(d.id) FILTER (WHERE d.status = 'pending') AS backlog,
       count(d.id) FILTER (WHERE d.status = 'pending' AND d.attempts > 0) AS retrying,
       count(d.id) FILTER (WHERE d.status = 'failed') AS failed
  FROM webhook_endpoints ep
  LEFT JOIN webhook_deliveries d ON d.endpoint_id = ep.id
 GROUP BY ep.id
 ORDER BY ep.created_at, ep.id
"""
