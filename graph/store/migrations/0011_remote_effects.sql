-- effects ledger states for remote effects: an intent committed before the remote call, its outcome after
ALTER TABLE effects ALTER COLUMN result DROP NOT NULL;
ALTER TABLE effects ADD COLUMN state text NOT NULL DEFAULT 'done'
    CHECK (state IN ('intent', 'done', 'failed', 'unknown'));
ALTER TABLE effects ADD COLUMN args jsonb;
ALTER TABLE effects ADD COLUMN finished_at timestamptz;
CREATE INDEX effects_open_intents ON effects (owner_id) WHERE state = 'intent';
