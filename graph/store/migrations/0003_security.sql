-- append-only, hash-chained audit log of governance decisions, and the tollgate_app role
-- The application inserts only `body`: RFC 8785 canonical JSON of one decision. The insert
-- trigger derives every other column from it, numbers the row and chains it:
-- row_hash = sha256(prev_hash || body), so editing, removing or reordering any row breaks the
-- chain for every row after it. Updates, deletes and truncation are refused by triggers (they
-- bind even a superuser, short of dropping the trigger) and revoked from the application role.
CREATE TABLE audit_log (
    seq bigint PRIMARY KEY,
    created_at timestamptz NOT NULL,
    owner_id text NOT NULL,
    thread_id text NOT NULL,
    turn_id text NOT NULL,
    stage text NOT NULL,
    decision text NOT NULL,
    reason text NOT NULL,
    code text NOT NULL,
    tool text NOT NULL,
    action text NOT NULL,
    args_hash text NOT NULL,
    mode text NOT NULL,
    detail jsonb NOT NULL,
    body text NOT NULL,
    prev_hash text NOT NULL CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    row_hash text NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);
CREATE INDEX audit_log_owner ON audit_log (owner_id, seq);
CREATE INDEX audit_log_turn ON audit_log (thread_id, turn_id);

CREATE FUNCTION audit_log_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc jsonb := NEW.body::jsonb;
    last_seq bigint;
    last_hash text;
BEGIN
    -- One writer at a time: the previous row must be committed before the next is chained.
    PERFORM pg_advisory_xact_lock(7627409473117);
    SELECT seq, row_hash INTO last_seq, last_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
    NEW.seq := coalesce(last_seq, 0) + 1;
    NEW.prev_hash := coalesce(last_hash, repeat('0', 64));
    NEW.row_hash := encode(sha256(convert_to(NEW.prev_hash || NEW.body, 'UTF8')), 'hex');
    NEW.created_at := (doc ->> 'ts')::timestamptz;
    NEW.owner_id := doc ->> 'owner_id';
    NEW.thread_id := doc ->> 'thread_id';
    NEW.turn_id := doc ->> 'turn_id';
    NEW.stage := doc ->> 'stage';
    NEW.decision := doc ->> 'decision';
    NEW.reason := doc ->> 'reason';
    NEW.code := doc ->> 'code';
    NEW.tool := doc ->> 'tool';
    NEW.action := doc ->> 'action';
    NEW.args_hash := doc ->> 'args_hash';
    NEW.mode := doc ->> 'mode';
    NEW.detail := doc -> 'detail';
    IF jsonb_typeof(NEW.detail) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'audit_log body needs a detail object' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION audit_log_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_chain();
CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_refuse();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;

-- The application's role: a non-superuser that may use Tollgate's tables but only read and
-- append the audit log. Log in as a role that is a member of it (GRANT tollgate_app TO ...).
-- Created only when the migrating user may create roles; otherwise an operator creates it.
DO $$
DECLARE
    may_create boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tollgate_app') THEN
        SELECT rolsuper OR rolcreaterole INTO may_create FROM pg_roles WHERE rolname = current_user;
        IF NOT coalesce(may_create, false) THEN
            RAISE NOTICE 'role tollgate_app not created: % may not create roles', current_user;
            RETURN;
        END IF;
        CREATE ROLE tollgate_app NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tollgate_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO tollgate_app', current_schema());
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO tollgate_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO tollgate_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO tollgate_app', current_schema());
    REVOKE ALL ON audit_log FROM tollgate_app;
    GRANT SELECT, INSERT ON audit_log TO tollgate_app;
END
$$;
