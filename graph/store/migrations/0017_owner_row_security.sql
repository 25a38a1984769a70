-- Row-level security keyed by a per-transaction owner: the application sets
-- `tollgate.owner` with set_config(..., true) inside each transaction that touches an owner's
-- rows (graph.db.owner_scope), so a query that forgets its `WHERE owner_id` sees, changes and
-- adds nothing of another owner's. '*' (never a valid owner id: graph.state refuses it) is for
-- the scheduler's cross-owner scans (expiry, due reminders, the trigger matcher), set only by
-- graph.db.all_owners. FORCE makes the policy bind the tables' owner too, for deployments that
-- serve with the role that ran the migrations; only a superuser or a BYPASSRLS role is exempt.
CREATE FUNCTION tollgate_owner_matches(row_owner text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT row_owner = current_setting('tollgate.owner', true)
                 OR current_setting('tollgate.owner', true) = '*' $$;

-- For tools' own migrations too: `SELECT tollgate_owner_rls('my_table')` on a table with an
-- owner_id column.
CREATE FUNCTION tollgate_owner_rls(tbl regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', tbl);
    EXECUTE format('CREATE POLICY owner_scope ON %s USING (tollgate_owner_matches(owner_id))'
                   ' WITH CHECK (tollgate_owner_matches(owner_id))', tbl);
END $$;

SELECT tollgate_owner_rls(t) FROM unnest(ARRAY[
    'approvals', 'effects', 'calendar_events', 'mail_messages', 'mail_outbox', 'tasks',
    'reminders', 'notes', 'owner_credentials'
]::regclass[]) AS t;
