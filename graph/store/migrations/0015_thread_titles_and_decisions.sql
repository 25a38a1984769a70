-- threads people can name, find and delete (softly); who decided an approval, and through which surface
-- `title` is the first message of the thread (set once, when it is sent) until the owner renames it;
-- `deleted_at` hides a thread from its owner's lists without losing its audit trail.
ALTER TABLE threads
    ADD COLUMN title text,
    ADD COLUMN deleted_at timestamptz;
UPDATE threads t SET title = (SELECT left(content, 80) FROM transcript
                              WHERE thread_id = t.thread_id AND role = 'user' ORDER BY id LIMIT 1);
-- The surface (web, cli, studio, chat API...) through which the owner decided.
ALTER TABLE approvals ADD COLUMN decided_via text;
