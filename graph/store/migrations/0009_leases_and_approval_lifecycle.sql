-- thread leases with fencing tokens; the approval lifecycle (approved, executing, executed, failed)
-- A turn holds its thread through a lease row, never a session lock: `fence` grows by one each
-- time the thread is taken, and every write of the turn checks it in its own transaction, so a
-- holder that lost its lease (cancelled, stalled, killed) can no longer write. A free lease has
-- no holder; a held one whose `expires_at` has passed may be taken by anyone.
CREATE TABLE thread_leases (
    thread_id text PRIMARY KEY,
    holder text,
    fence bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX thread_leases_stale ON thread_leases (expires_at) WHERE holder IS NOT NULL;

-- pending -> approved -> executing -> executed | failed, or rejected / expired / superseded.
-- `edited` is gone: an edit that runs is an approval of the edited arguments (decision = 'edit').
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals
    ADD COLUMN decision text CHECK (decision IN ('approve', 'edit', 'reject')),
    ADD COLUMN approved_args_hash text,
    ADD COLUMN error_code text,
    ADD COLUMN error text,
    ADD COLUMN finished_at timestamptz;
-- Rows from before: an approval that ran has its ledger row; one without did not run.
UPDATE approvals a SET status = CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.idem_key = a.approval_id)
                                     THEN 'executed' ELSE 'failed' END,
                       decision = CASE WHEN a.status = 'edited' THEN 'edit' ELSE 'approve' END,
                       approved_args_hash = a.args_hash,
                       error_code = CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.idem_key = a.approval_id)
                                         THEN NULL ELSE 'unavailable' END
WHERE a.status IN ('approved', 'edited');
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'executing', 'executed', 'failed', 'rejected', 'expired', 'superseded'));
ALTER TABLE approvals ADD CONSTRAINT approvals_approved_hash
    CHECK (status NOT IN ('approved', 'executing', 'executed') OR approved_args_hash IS NOT NULL);
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_thread_open ON approvals (thread_id) WHERE status IN ('pending', 'approved', 'executing');

-- The fence check a turn's write runs first, in the write's own transaction: it holds the lease
-- row FOR SHARE until that transaction ends (so the thread cannot be taken between the check and
-- the commit) and fails the whole transaction when the turn no longer holds its thread.
CREATE FUNCTION tollgate_hold_fence(p_thread text, p_fence bigint, p_holder text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM thread_leases WHERE thread_id = p_thread AND fence = p_fence AND holder = p_holder FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the lease on this thread was lost' USING ERRCODE = 'TGL01';
    END IF;
END
$$;
