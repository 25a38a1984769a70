-- One approval request may list several actions (a model answer with several writes): each
-- action keeps its own row (its decision, its approved hash, its effect), and the rows of one
-- interrupt share the request's id, the first action's approval_id. ``position`` is the
-- action's place in the request (0 first). The transcript keeps each turn's tool exchange
-- (calls and results, as JSON) for the picker's window of earlier turns.
ALTER TABLE approvals ADD COLUMN request_id text;
UPDATE approvals SET request_id = approval_id;
ALTER TABLE approvals ALTER COLUMN request_id SET NOT NULL;
ALTER TABLE approvals ADD COLUMN position integer NOT NULL DEFAULT 0;
CREATE INDEX approvals_request ON approvals (request_id);

ALTER TABLE transcript DROP CONSTRAINT transcript_role_check;
ALTER TABLE transcript ADD CONSTRAINT transcript_role_check CHECK (role IN ('user', 'assistant', 'exchange'));
