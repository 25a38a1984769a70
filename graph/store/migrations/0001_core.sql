-- threads, transcript, approvals, idempotency ledger and the four built-in tool stores
CREATE TABLE threads (
    thread_id text PRIMARY KEY,
    owner_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX threads_owner ON threads (owner_id, updated_at DESC);

-- The conversation lives here, not in every checkpoint, so a turn's cost does not grow
-- with the thread's length.
CREATE TABLE transcript (
    id bigserial PRIMARY KEY,
    thread_id text NOT NULL REFERENCES threads (thread_id),
    turn_id text NOT NULL,
    role text NOT NULL CHECK (role IN ('user', 'assistant')),
    content text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (thread_id, turn_id, role)
);

CREATE TABLE approvals (
    approval_id text PRIMARY KEY,
    thread_id text NOT NULL REFERENCES threads (thread_id),
    owner_id text NOT NULL,
    tool text NOT NULL,
    action text NOT NULL,
    args_hash text NOT NULL,
    preview text NOT NULL,
    request jsonb NOT NULL,
    expires_at timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'edited', 'rejected', 'expired', 'superseded')),
    created_at timestamptz NOT NULL DEFAULT now(),
    decided_at timestamptz
);
CREATE INDEX approvals_owner_pending ON approvals (owner_id) WHERE status = 'pending';

-- Idempotency ledger: a write commits its row in the same transaction as its effect,
-- so a replayed execute step finds it and returns the stored result instead of writing.
CREATE TABLE effects (
    idem_key text PRIMARY KEY,
    owner_id text NOT NULL,
    tool text NOT NULL,
    action text NOT NULL,
    result jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE calendar_events (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    title text NOT NULL,
    starts_at timestamptz NOT NULL,
    ends_at timestamptz NOT NULL,
    location text NOT NULL DEFAULT '',
    description text NOT NULL DEFAULT '',
    status text NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'cancelled')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX calendar_events_owner_start ON calendar_events (owner_id, starts_at);

CREATE TABLE mail_messages (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    from_addr text NOT NULL,
    to_addrs text[] NOT NULL,
    subject text NOT NULL,
    body text NOT NULL,
    received_at timestamptz NOT NULL,
    is_read boolean NOT NULL DEFAULT false,
    trashed_at timestamptz
);
CREATE INDEX mail_messages_owner_received ON mail_messages (owner_id, received_at DESC);

CREATE TABLE mail_outbox (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    to_addrs text[] NOT NULL,
    subject text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_outbox_owner ON mail_outbox (owner_id, created_at DESC);

CREATE TABLE tasks (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    title text NOT NULL,
    due_date date,
    status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'done')),
    created_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
CREATE INDEX tasks_owner ON tasks (owner_id, status, created_at);

CREATE TABLE reminders (
    id text PRIMARY KEY,
    owner_id text NOT NULL,
    text text NOT NULL,
    due_at timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'cancelled', 'fired')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reminders_owner_due ON reminders (owner_id, status, due_at);
