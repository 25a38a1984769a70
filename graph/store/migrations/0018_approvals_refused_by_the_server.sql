-- an approval the server closed after too many invalid decisions: `refused`, not `rejected`
-- (`rejected` is a person's decision; here nobody decided, and nothing ran).
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'executing', 'executed', 'failed', 'rejected', 'expired', 'superseded',
                      'refused'));
