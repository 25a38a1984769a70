-- background runs and their event ledger, trigger rules and fire ledgers, result deliveries, daily reminders
-- The job queue itself (procrastinate's tables) is applied at start-up by graph/background/queue.py,
-- from the pinned library's own schema file; `queue_schema` records which version is installed.
CREATE TABLE queue_schema (
    name text PRIMARY KEY,
    version text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- One row per background run: an ordinary turn on thread `bg:<run_id>`, driven by a worker.
CREATE TABLE background_runs (
    run_id text PRIMARY KEY,
    owner_id text NOT NULL,
    status text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'awaiting_approval', 'succeeded', 'failed', 'cancelled')),
    source text NOT NULL CHECK (source IN ('api', 'offer', 'trigger')),
    title text NOT NULL,
    instruction text NOT NULL,
    timezone text NOT NULL,
    origin_thread_id text NOT NULL REFERENCES threads (thread_id),
    trigger_id text,
    approval_id text,
    cancel_requested boolean NOT NULL DEFAULT false,
    attempts integer NOT NULL DEFAULT 0,
    reply text,
    outcome text,
    error_code text,
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX background_runs_owner ON background_runs (owner_id, created_at DESC);
CREATE INDEX background_runs_active ON background_runs (status) WHERE status IN ('queued', 'running');

-- What happened to a run, in order: lifecycle entries (turn_id NULL) and the run's turn events.
-- A replayed turn event (same turn, same seq) is written once.
CREATE TABLE background_run_events (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES background_runs (run_id),
    kind text NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    turn_id text,
    seq integer,
    data jsonb NOT NULL DEFAULT '{}'::jsonb,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (run_id, turn_id, seq)
);
CREATE INDEX background_run_events_run ON background_run_events (run_id, id);

-- Trigger rules: a mail from a sender (exact address or @domain, optional subject substring),
-- or N minutes before an event whose title matches. Cancel is soft.
CREATE TABLE trigger_rules (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('mail', 'event')),
    sender text,
    subject_contains text,
    title_contains text,
    lead_minutes integer CHECK (lead_minutes BETWEEN 1 AND 10080),
    instruction text NOT NULL,
    status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'cancelled')),
    armed_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    cancelled_at timestamptz,
    CHECK ((kind = 'mail' AND sender IS NOT NULL) OR (kind = 'event' AND title_contains IS NOT NULL AND lead_minutes IS NOT NULL))
);
CREATE INDEX trigger_rules_owner ON trigger_rules (owner_id, created_at DESC);
CREATE INDEX trigger_rules_active ON trigger_rules (kind) WHERE status = 'active';

-- A rule fires at most once per matching item: the evaluator inserts here first.
CREATE TABLE trigger_fires (
    rule_id text NOT NULL REFERENCES trigger_rules (id),
    item_key text NOT NULL,
    run_id text NOT NULL,
    fired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, item_key)
);

-- Reminders: optional daily recurrence (the next occurrence keeps its wall-clock time in `recurrence_tz`).
ALTER TABLE reminders ADD COLUMN recurrence text CHECK (recurrence IN ('daily'));
ALTER TABLE reminders ADD COLUMN recurrence_tz text NOT NULL DEFAULT 'UTC';

-- One occurrence of a reminder fires once.
CREATE TABLE reminder_fires (
    reminder_id text NOT NULL REFERENCES reminders (id),
    due_at timestamptz NOT NULL,
    thread_id text NOT NULL,
    fired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reminder_id, due_at)
);
