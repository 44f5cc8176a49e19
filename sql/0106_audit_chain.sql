-- Tamper evidence for audit_log (issue 14): each row stores the SHA-256 of the previous row
-- of the same account (prev_hash; 32 zero bytes for the first) and its own hash:
--   row_hash = sha256(prev_hash || canonical(row))
-- canonical(row) = 'tenantd.audit.v1' then, for id, account_id, actor_user_id, action,
-- target, data::text and created_at (UTC, 'YYYY-MM-DDTHH:MM:SS.ffffffZ'), either '~' (NULL)
-- or '<byte length>:<UTF-8 text>'. tenantd/audit/chain.py recomputes it in Python
-- (`tenantd audit verify`).
--
-- A BEFORE INSERT trigger computes both, so every writer chains, whatever its SQL. It takes
-- a per-account transaction-level advisory lock first and only then draws the row's id, so
-- one account's rows are chained in id order and concurrent writers queue instead of
-- forking; the unique index on (account_id, prev_hash) refuses a fork regardless.
-- UPDATE and DELETE are refused: the log is append-only (the hard-delete sweep keeps it).

ALTER TABLE audit_log ADD COLUMN prev_hash bytea;
ALTER TABLE audit_log ADD COLUMN row_hash bytea;

CREATE FUNCTION tenantd_audit_field(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN value IS NULL THEN '~'
                ELSE octet_length(convert_to(value, 'UTF8'))::text || ':' || value END
$$;

CREATE FUNCTION tenantd_audit_canonical(
    id bigint, account_id uuid, actor_user_id uuid, action text, target text, data jsonb,
    created_at timestamptz
) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to(
        'tenantd.audit.v1'
        || tenantd_audit_field(id::text)
        || tenantd_audit_field(account_id::text)
        || tenantd_audit_field(actor_user_id::text)
        || tenantd_audit_field(action)
        || tenantd_audit_field(target)
        || tenantd_audit_field(data::text)
        || tenantd_audit_field(to_char(created_at AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
        'UTF8')
$$;

CREATE FUNCTION tenantd_audit_chain() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    previous bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('audit-chain:' || COALESCE(NEW.account_id::text, '-'), 0));
    -- Drawn under the lock: the account's rows get ids in chain order.
    NEW.id := nextval(pg_get_serial_sequence('audit_log', 'id')::regclass);
    NEW.created_at := COALESCE(NEW.created_at, now());
    SELECT a.row_hash INTO previous FROM audit_log a
     WHERE a.account_id IS NOT DISTINCT FROM NEW.account_id
     ORDER BY a.id DESC LIMIT 1;
    NEW.prev_hash := COALESCE(previous, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
    NEW.row_hash := sha256(NEW.prev_hash || tenantd_audit_canonical(
        NEW.id, NEW.account_id, NEW.actor_user_id, NEW.action, NEW.target, NEW.data,
        NEW.created_at));
    RETURN NEW;
END $$;

CREATE FUNCTION tenantd_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;

-- Chain the rows written before this migration, in id order per account (one pass, sorted by
-- account: each row is updated once).
DO $$
DECLARE
    r record;
    previous bytea;
    chain_account uuid;
    started boolean := false;
BEGIN
    FOR r IN SELECT * FROM audit_log ORDER BY account_id NULLS FIRST, id LOOP
        IF NOT started OR r.account_id IS DISTINCT FROM chain_account THEN
            previous := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
            chain_account := r.account_id;
            started := true;
        END IF;
        UPDATE audit_log SET prev_hash = previous,
               row_hash = sha256(previous || tenantd_audit_canonical(
                   r.id, r.account_id, r.actor_user_id, r.action, r.target, r.data,
                   r.created_at))
         WHERE id = r.id
        RETURNING row_hash INTO previous;
    END LOOP;
END $$;

ALTER TABLE audit_log ALTER COLUMN prev_hash SET NOT NULL;
ALTER TABLE audit_log ALTER COLUMN row_hash SET NOT NULL;
CREATE UNIQUE INDEX audit_log_chain_key ON audit_log (account_id, prev_hash) NULLS NOT DISTINCT;
CREATE INDEX audit_log_account_id_idx ON audit_log (account_id, id);

CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION tenantd_audit_chain();
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION tenantd_audit_append_only();
