-- HTTP surfaces: bearer tokens (stored as SHA-256 hashes) and the turn event log for resumable streams
CREATE TABLE api_tokens (
    token_hash text PRIMARY KEY CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    owner_id text NOT NULL,
    label text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_tokens_owner ON api_tokens (owner_id);

-- Every event of a turn run over HTTP, written as it streams, so a client that reconnects
-- with Last-Event-ID gets what came after it (turn in flight or finished). `id` keeps the
-- insertion order across turns; (thread, turn, seq) is the event's identity.
CREATE TABLE turn_events (
    id bigserial NOT NULL,
    thread_id text NOT NULL REFERENCES threads (thread_id),
    turn_id text NOT NULL,
    seq integer NOT NULL CHECK (seq > 0),
    owner_id text NOT NULL,
    type text NOT NULL,
    event jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, turn_id, seq)
);
CREATE INDEX turn_events_thread_order ON turn_events (thread_id, id DESC);
