-- background runs can be paused between steps and resumed
ALTER TABLE background_runs ADD COLUMN pause_requested boolean NOT NULL DEFAULT false;
ALTER TABLE background_runs DROP CONSTRAINT background_runs_status_check;
ALTER TABLE background_runs ADD CONSTRAINT background_runs_status_check
    CHECK (status IN ('queued', 'running', 'paused', 'awaiting_approval', 'succeeded', 'failed', 'cancelled'));
