-- model usage ledger: tokens per turn, role, provider and model
CREATE TABLE model_usage (
    id bigserial PRIMARY KEY,
    thread_id text NOT NULL,
    turn_id text NOT NULL,
    owner_id text NOT NULL,
    role text NOT NULL CHECK (role IN ('picker', 'naturalizer')),
    provider text NOT NULL,
    model text NOT NULL,
    input_tokens integer NOT NULL CHECK (input_tokens >= 0),
    output_tokens integer NOT NULL CHECK (output_tokens >= 0),
    estimated boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX model_usage_owner ON model_usage (owner_id, created_at DESC);
CREATE INDEX model_usage_turn ON model_usage (thread_id, turn_id);
