-- a thread's pending approval is found by its thread (a decision closes it whoever resumed)
CREATE INDEX approvals_thread_pending ON approvals (thread_id) WHERE status = 'pending';
